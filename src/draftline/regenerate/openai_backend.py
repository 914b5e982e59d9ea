"""Any OpenAI-compatible chat server (vLLM, SGLang, llama.cpp), with bounded retries.

Uses only the standard library so the default install stays small; requests run on a
thread pool of `concurrency` workers.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ..config import OpenAIParams, RegenerateParams
from .answer import Answer, split_reasoning

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class EndpointError(RuntimeError):
    pass


class OpenAIBackend:
    name = "openai"

    def __init__(self, params: RegenerateParams):
        self.params = params
        self.cfg: OpenAIParams = params.openai
        self.url = self.cfg.url.rstrip("/") + "/chat/completions"
        self._key = None
        if self.cfg.api_key_env:
            self._key = os.environ.get(self.cfg.api_key_env)
            if not self._key:
                raise EndpointError(
                    f"regenerate.openai.api_key_env: environment variable {self.cfg.api_key_env} is not set")

    def _post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        last = "no attempt"
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                # Capped exponential backoff with jitter, so many workers do not retry in step.
                delay = min(self.cfg.backoff_s * 2 ** (attempt - 1), 30.0)
                time.sleep(delay * (0.5 + random.random()))
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.cfg.timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as err:
                last = f"HTTP {err.code}: {err.read()[:200]!r}"
                if err.code not in RETRY_STATUS:
                    break
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as err:
                last = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            except json.JSONDecodeError:
                last = "malformed JSON response"
        raise EndpointError(f"{self.url}: failed after {self.cfg.max_retries + 1} attempts: {last}")

    def _one(self, conv: list[dict], seed: int) -> Answer:
        p = self.params
        body = {"model": self.cfg.model, "messages": conv, "max_tokens": p.max_new_tokens,
                "temperature": p.temperature, "top_p": p.top_p, "seed": seed}
        resp = self._post(body)
        try:
            choice = resp["choices"][0]
            msg = choice["message"]
            text = msg.get("content") or ""
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            usage = resp.get("usage") or {}
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"{self.url}: malformed response: {str(resp)[:200]}") from None
        text, reasoning = split_reasoning(text, reasoning)
        return Answer(text=text, reasoning=reasoning, finish_reason=choice.get("finish_reason") or "stop",
                      prompt_tokens=int(usage.get("prompt_tokens", 0)),
                      completion_tokens=int(usage.get("completion_tokens", 0)),
                      served_model=resp.get("model"))

    def generate(self, conversations: list[list[dict]], seed: int) -> list[Answer]:
        with ThreadPoolExecutor(self.cfg.concurrency) as pool:
            return list(pool.map(lambda c: self._one(c, seed), conversations))
