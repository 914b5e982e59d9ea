"""A minimal OpenAI-compatible chat server on loopback, answering with the real target.

Test-only: it stands in for vLLM/SGLang/llama.cpp, which do not run here. `fail_first`
makes the first N requests answer HTTP 500, to exercise retries; `think` makes it answer
the way a reasoning target does through vLLM: "field" puts reasoning in
`reasoning_content` (a reasoning parser), "tags" inlines it in <think> tags (no parser),
"cut" answers a trace cut by max_tokens inside <think> (finish_reason length), "open_cut"
the same without the opening tag (a generation prompt that opened it). Asked with
`return_token_ids` (vLLM's field) and no `think`, it returns the generated ids on the
choice as `token_ids`, as vLLM does. Asked for `logprobs` (and `logprobs=True`, the
default), it returns each generated token's log-prob and its top-1 token as vLLM does:
tokens named `token_id:N` when asked with `return_tokens_as_token_ids`, else by their text.
`EchoServer` has no model: it echoes the request's key back, to test what gets stored.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from draftline.config.regenerate import RegenerateParams
from draftline.regenerate.hf_backend import HFBackend


class JSONHandler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, out: dict, status: int = 200):
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Loopback:
    """A threaded HTTP server on a free loopback port, serving `handler`, as a context manager."""

    def _serve(self, handler) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class ChatServer(Loopback):
    def __init__(self, model, tokenizer, fail_first: int = 0, served_name: str = "smollm2", think: str | None = None,
                 logprobs: bool = True):
        self.model, self.tok = model, tokenizer
        self.logprobs = logprobs
        self.fail_left = fail_first
        self.requests = 0
        self.auth_headers: list[str | None] = []
        self.lock = threading.Lock()
        self.served_name = served_name
        self.think = think
        self.bodies: list[dict] = []
        server = self

        class Handler(JSONHandler):
            def do_GET(self):
                self._send({"object": "list", "data": [{"id": server.served_name, "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests += 1
                    server.bodies.append(body)
                    server.auth_headers.append(self.headers.get("Authorization"))
                    fail = server.fail_left > 0
                    server.fail_left -= fail
                    if not fail:
                        params = RegenerateParams(max_new_tokens=body["max_tokens"],
                                                  temperature=body.get("temperature", 0.0))
                        backend = HFBackend(server.model, server.tok, params, [server.tok.eos_token_id])
                        scored = bool(body.get("logprobs")) and server.logprobs
                        a = backend.generate([body["messages"]], body.get("seed", 0), scored=[scored])[0]
                if fail:
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b'{"error": "injected"}')
                    return
                msg = {"role": "assistant", "content": a.text}
                finish = a.finish_reason
                if server.think == "field":
                    msg["reasoning_content"] = "Reasoning: " + a.text
                elif server.think == "tags":
                    msg["content"] = f"<think>\nReasoning: {a.text}\n</think>\n\n{a.text}"
                elif server.think in ("cut", "open_cut"):
                    msg["content"] = ("<think>\n" if server.think == "cut" else "") + f"Reasoning: {a.text}"
                    finish = "length"
                choice = {"index": 0, "finish_reason": finish, "message": msg}
                if body.get("return_token_ids") and server.think is None:
                    choice["token_ids"] = a.token_ids
                if a.logprobs is not None and server.think is None:
                    choice["logprobs"] = {"content": server.logprob_entries(a, body)}
                self._send({"model": server.served_name, "choices": [choice],
                            "usage": {"prompt_tokens": a.prompt_tokens, "completion_tokens": a.completion_tokens}})

        self._serve(Handler)

    def logprob_entries(self, a, body: dict) -> list[dict]:
        def name(token: str) -> str:  # HFBackend names tokens by id (logprobs.token_name)
            i = int(token.split(":")[1])
            return token if body.get("return_tokens_as_token_ids") else self.tok.decode([i])

        emitted = [f"token_id:{i}" for i in a.token_ids]
        return [{"token": name(t), "logprob": lp, "top_logprobs": [{"token": name(top), "logprob": lp}]}
                for t, lp, top in zip(emitted, a.logprobs, a.top1)]


class EchoServer(Loopback):
    """A server that echoes the request's Authorization header back, as some servers and
    proxies do in their errors. The last word of the prompt picks the answer: "reject" ->
    HTTP 400, "crash" -> HTTP 500, "garble" -> HTTP 200 without choices, "echo" -> an
    answer quoting the header, anything else -> "ok". GET /models lists `served_name` and
    the header as a second id. No model behind it: for tests of what the stage stores."""

    def __init__(self, served_name: str = "echo-model"):
        class Handler(JSONHandler):
            def do_GET(self):
                auth = self.headers.get("Authorization")
                self._send({"object": "list", "data": [{"id": served_name}, {"id": f"echo {auth}"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                auth = self.headers.get("Authorization")
                echo = {"error": "request refused", "request_headers": {"Authorization": auth}}
                word = body["messages"][-1]["content"].split()[-1]
                if word == "reject":
                    return self._send(echo, 400)
                if word == "crash":
                    return self._send(echo, 500)
                if word == "garble":
                    return self._send({"id": "x", "object": "chat.completion", **echo})
                text = f"you sent {auth}" if word == "echo" else "ok"
                self._send({"model": served_name, "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": text}}]})

        self._serve(Handler)
