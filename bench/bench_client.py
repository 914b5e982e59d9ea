"""Client overhead of regeneration: requests/s against a server that answers instantly.

    .venv/bin/python bench/bench_client.py [--requests 20000] [--in-flight 256]

The server (a separate process, raw asyncio, canned chat-completion JSON, keep-alive)
costs next to nothing per request, so what is measured is the client. In the same run:
  1. draftline's async client alone (ChatClient + EndpointPool), 256 requests in flight;
  2. the whole openai driver of the regenerate stage (keys, rows, shard writes);
  3. the approach of SpecForge and Model-Optimizer: a thread pool of 256 workers calling
     the synchronous `openai` client (and of 32 workers, its best size here: fewer
     threads fight less over the GIL).
Rounds alternate between clients; each client's best round is reported, with CPU time
per request of the client process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BODY = json.dumps({
    "id": "x", "object": "chat.completion", "model": "bench", "created": 0,
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "An instant answer of a few words."}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
}).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]}).encode()


def _reply(body: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


class Instant(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            n = int(head[i + 15:].split(b"\r\n", 1)[0]) if i >= 0 else 0
            if len(self.buf) < end + 4 + n:
                return
            self.t.write(_reply(MODELS if head.startswith(b"get") else BODY))
            self.buf = self.buf[end + 4 + n:]


def serve(port_q) -> None:
    async def main():
        srv = await asyncio.get_running_loop().create_server(Instant, "127.0.0.1", 0, backlog=4096)
        port_q.put(srv.sockets[0].getsockname()[1])
        await srv.serve_forever()
    asyncio.run(main())


def _messages(i: int) -> list[dict]:
    return [{"role": "user", "content": f"Question number {i}: what is {i} plus {i}?"}]


def bench_client(url: str, n: int, in_flight: int) -> int:
    from draftline.config.regenerate import OpenAIParams
    from draftline.regenerate.client import ChatClient
    from draftline.regenerate.endpoints import EndpointPool

    cfg = OpenAIParams(urls=[url], max_in_flight=in_flight)

    async def main():
        pool = EndpointPool(cfg.urls, in_flight)
        it = iter(range(n))
        ok = 0

        async def worker(c):
            nonlocal ok
            for i in it:
                a = await c.chat({"model": "bench", "messages": _messages(i), "max_tokens": 16})
                ok += bool(a.text)
        async with ChatClient(cfg, pool, None) as c:
            await asyncio.gather(*(worker(c) for _ in range(in_flight)))
        return ok
    return asyncio.run(main())


def bench_stage(url: str, n: int, in_flight: int) -> int:
    from draftline.config.regenerate import OpenAIParams, RegenerateParams
    from draftline.regenerate.drive import answer_all
    from draftline.regenerate.openai_run import OpenAIDriver

    p = RegenerateParams(backend="openai", max_new_tokens=16, shard_rows=1024,
                         openai=OpenAIParams(urls=[url], max_in_flight=in_flight))
    rows = [{"id": str(i), "source": "b", "category": "chat", "split": "train", "messages": _messages(i)}
            for i in range(n)]
    with tempfile.TemporaryDirectory() as d:
        out = answer_all(rows, OpenAIDriver(p, Path(d)), p, "fp", Path(d) / "work")
    return len(out.rows)


def bench_threads32(url: str, n: int, in_flight: int) -> int:
    return bench_threads(url, n, 32)


def bench_threads(url: str, n: int, in_flight: int) -> int:
    import openai

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)

    def one(i):
        r = client.chat.completions.create(model="bench", messages=_messages(i), max_tokens=16)
        return bool(r.choices[0].message.content)
    with ThreadPoolExecutor(in_flight) as pool:
        return sum(pool.map(one, range(n)))


def measure(fn, url, n, in_flight) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    done = fn(url, n, in_flight)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert done == n, f"{fn.__name__}: {done} of {n} answered"
    return n / wall, cpu / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--baseline-requests", type=int, default=5000)
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    from draftline import progress

    # No progress bars (the regenerate driver's) unless DRAFTLINE_NO_PROGRESS is set to something
    # else than 1; the library reads no environment, so the switch is applied here.
    os.environ.setdefault("DRAFTLINE_NO_PROGRESS", "1")
    progress.configure(os.environ["DRAFTLINE_NO_PROGRESS"] != "1")
    q = mp.get_context("spawn").Queue()
    server = mp.get_context("spawn").Process(target=serve, args=(q,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{q.get(timeout=30)}/v1"
    runs = {"draftline async client": (bench_client, a.requests),
            "draftline regenerate driver (keys, rows, shards)": (bench_stage, a.requests),
            "thread pool + sync openai client": (bench_threads, a.baseline_requests),
            "thread pool + sync openai client, 32 threads": (bench_threads32, a.baseline_requests)}
    best: dict[str, tuple[float, float]] = {}
    for r in range(a.rounds):
        for name, (fn, n) in runs.items():
            rps, cpu_us = measure(fn, url, n, a.in_flight)
            print(f"round {r + 1}: {name}: {rps:,.0f} req/s, {cpu_us:,.0f} us CPU/request", file=sys.stderr)
            if name not in best or rps > best[name][0]:
                best[name] = (rps, cpu_us)
    server.terminate()
    base = best["thread pool + sync openai client"][0]
    print(f"\n{a.in_flight} requests in flight, instant local server, best of {a.rounds} rounds\n")
    print("| client | requests/s | client CPU per request | vs 256-thread pool |")
    print("| --- | --- | --- | --- |")
    for name, (rps, cpu_us) in best.items():
        print(f"| {name} | {rps:,.0f} | {cpu_us:,.0f} us | {rps / base:.2f}x |")


if __name__ == "__main__":
    main()
