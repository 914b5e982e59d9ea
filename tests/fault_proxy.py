"""An HTTP proxy on loopback that injects faults between the client and a real server.

`rule(n, body)` picks what happens to the n-th POST (1-based): "pass", "drop" (close the
connection without answering), ("delay", seconds) then pass, "500", "429", "garbage"
(HTTP 200 with a body that is not JSON). GETs always pass. Runs its own event loop in a
thread so the code under test can run its own.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from typing import Callable


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, dict, bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    return lines[0].encode(), headers, body


def _response(status: int, reason: str, body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n").encode() + body


class FaultProxy:
    def __init__(self, upstream: str, rule: Callable[[int, dict], object]):
        # upstream: http://host:port (no path); the client's path is forwarded unchanged.
        host_port = upstream.split("//", 1)[1].split("/", 1)[0]
        self.up_host, self.up_port = host_port.rsplit(":", 1)
        self.rule = rule
        self.posts = 0
        self.actions: Counter[str] = Counter()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    async def _forward(self, request_line: bytes, headers: dict, body: bytes) -> bytes:
        r, w = await asyncio.open_connection(self.up_host, int(self.up_port))
        hdr = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k not in ("connection", "content-length"))
        w.write(request_line + b"\r\n" + hdr.encode() + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await w.drain()
        data = await r.read()
        w.close()
        return data

    async def _handle(self, reader, writer):
        try:
            while True:
                try:
                    request_line, headers, body = await _read_request(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                action = "pass"
                if request_line.startswith(b"POST"):
                    self.posts += 1
                    action = self.rule(self.posts, json.loads(body or b"{}"))
                name = action[0] if isinstance(action, tuple) else action
                self.actions[name] += 1
                if action == "drop":
                    writer.transport.abort()  # a reset, not a polite close
                    return
                if action == "500":
                    writer.write(_response(500, "Internal Server Error", b'{"error": "injected"}'))
                elif action == "429":
                    writer.write(_response(429, "Too Many Requests", b'{"error": "slow down"}', "Retry-After: 0\r\n"))
                elif action == "garbage":
                    writer.write(_response(200, "OK", b"<html>proxy error</html>"))
                else:
                    if isinstance(action, tuple) and action[0] == "delay":
                        await asyncio.sleep(action[1])
                    # The upstream answers with Connection: close; pass that on.
                    writer.write(await self._forward(request_line, headers, body))
                    await writer.drain()
                    writer.close()
                    return
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    def _serve(self):
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "FaultProxy":
        self.thread.start()
        self.ready.wait(10)
        return self

    async def _shutdown(self) -> None:
        # Cancel handlers still inside an injected delay and let them finish on the running
        # loop; stopping it under them leaves coroutines that fail when collected.
        self.server.close()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self.loop.stop()

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        self.thread.join(5)
