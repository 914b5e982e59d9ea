"""llama.cpp's OpenAI-compatible server (llama-cpp-python) serving the embedded GGUF.

A real inference server on loopback: the closest thing to vLLM/SGLang that runs here.
`requantized` writes the embedded GGUF in another quantisation (llama.cpp's own
quantizer), once per test cache: a server that serves the target but not as converted.
"""

from __future__ import annotations

import ctypes
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from draftline.target.materialize import embedded_gguf

ALIAS = "smollm2"


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


CACHE = Path(__file__).resolve().parent / ".cache" / "gguf"


def command(port: int, n_ctx: int = 512, model: Path | None = None, extra: list[str] = ()) -> list[str]:
    """model: a GGUF (default: the embedded one); extra: more server flags (`--chat_format chatml`)."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model or embedded_gguf()), "--model_alias", ALIAS,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "1",
            "--verbose", "False", *extra]


def requantized(ftype: str) -> Path:
    """The embedded GGUF requantized to `ftype` (a llama.cpp type name: Q4_0, Q2_K, Q8_0),
    built once into the test cache."""
    import llama_cpp

    out = CACHE / f"{embedded_gguf().stem.rsplit('.', 1)[0]}.{ftype}.gguf"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
        params.allow_requantize = True  # the embedded file is already Q4_1
        tmp = out.with_suffix(".part")
        if llama_cpp.llama_model_quantize(str(embedded_gguf()).encode(), str(tmp).encode(), ctypes.byref(params)):
            raise RuntimeError(f"llama.cpp could not requantize {embedded_gguf()} to {ftype}")
        tmp.rename(out)  # whole or not at all: a killed build leaves no half file in the cache
    return out


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
    def __init__(self, n_ctx: int = 512, model: Path | None = None, extra: list[str] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = subprocess.Popen(command(self.port, n_ctx, model, extra), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def wait(self) -> "LlamaServer":
        wait_healthy(self.url)
        return self

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self) -> "LlamaServer":
        try:
            return self.wait()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
