"""A minimal OpenAI-compatible chat server on loopback, answering with the real target.

Test-only: it stands in for vLLM/SGLang/llama.cpp, which do not run here. `fail_first`
makes the first N requests answer HTTP 500, to exercise retries.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from draftline.config import RegenerateParams
from draftline.regenerate.hf_backend import HFBackend


class ChatServer:
    def __init__(self, model, tokenizer, fail_first: int = 0, served_name: str = "smollm2"):
        self.model, self.tok = model, tokenizer
        self.fail_left = fail_first
        self.requests = 0
        self.auth_headers: list[str | None] = []
        self.lock = threading.Lock()
        self.served_name = served_name
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                    server.auth_headers.append(self.headers.get("Authorization"))
                    fail = server.fail_left > 0
                    server.fail_left -= fail
                    if not fail:
                        params = RegenerateParams(max_new_tokens=body["max_tokens"],
                                                  temperature=body.get("temperature", 0.0))
                        backend = HFBackend(server.model, server.tok, params, [server.tok.eos_token_id])
                        a = backend.generate([body["messages"]], body.get("seed", 0))[0]
                if fail:
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b'{"error": "injected"}')
                    return
                out = {"model": server.served_name, "choices": [{"index": 0, "finish_reason": a.finish_reason,
                       "message": {"role": "assistant", "content": a.text}}],
                       "usage": {"prompt_tokens": a.prompt_tokens, "completion_tokens": a.completion_tokens}}
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
