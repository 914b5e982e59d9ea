"""llama.cpp's OpenAI-compatible server (llama-cpp-python) serving the embedded GGUF.

A real inference server on loopback: the closest thing to vLLM/SGLang that runs here.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

from draftline.target.materialize import embedded_gguf

ALIAS = "smollm2"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def command(port: int, n_ctx: int = 512) -> list[str]:
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf()), "--model_alias", ALIAS,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "1",
            "--verbose", "False"]


def wait_healthy(url: str, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"llama.cpp server at {url} did not come up")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class LlamaServer:
    def __init__(self, n_ctx: int = 512):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = subprocess.Popen(command(self.port, n_ctx), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait(self) -> "LlamaServer":
        wait_healthy(self.url)
        return self

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
