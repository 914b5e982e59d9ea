"""Async chat-completions client for OpenAI-compatible servers, with retries.

One aiohttp session for the whole run: connections are kept alive and reused, and a
request costs the client a few hundred microseconds, so one process keeps many GPU
servers busy (bench/bench_client.py). Every request goes to the least-loaded endpoint
of the pool and is retried there or elsewhere on transient faults.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from typing import TYPE_CHECKING

import aiohttp

from .. import secrets
from .answer import Answer, split_reasoning
from .endpoints import EndpointPool
from .logprobs import token_name

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.regenerate import OpenAIParams

# Transient: worth another try. Anything else (400 context too long, 404, 422) is an
# answer about this row and is recorded for it at once.
RETRYABLE = {"timeout", "connection", "http_429", "http_5xx", "malformed"}


class RowFailure(Exception):
    """A row that could not be answered; recorded in the errors file, never dropped silently."""

    def __init__(self, kind: str, reason: str, attempts: int):
        reason = secrets.mask(reason)  # servers echo the request, Authorization header included
        super().__init__(f"{kind}: {reason}")
        self.kind, self.reason, self.attempts = kind, reason, attempts


class EndpointError(RuntimeError):
    """The run cannot go on (endpoint down at start, wrong model, rejected key)."""


def _excerpt(raw: bytes, limit: int) -> str:
    """The start of a response body for an error reason, masked before it is cut, so no
    part of an echoed key survives the cut."""
    return secrets.mask(raw.decode("utf-8", "replace"))[:limit]


def _token(entry: dict) -> str:
    """A logprobs entry's token: by id where the server gives one (llama.cpp's server,
    vLLM's `token_id:N` text), else by its text."""
    tid = entry.get("id")
    return token_name(tid) if type(tid) is int else str(entry["token"])


def parse_logprobs(choice: dict) -> tuple[list[str], list[float], list[str]] | None:
    """(each generated token, its log-prob, the server's top-1 token there) from a chat
    choice's `logprobs.content`; None when the server sent none or a shape not understood
    (the agreement check then says it had nothing to check)."""
    try:
        content = (choice.get("logprobs") or {}).get("content")
        if not content:
            return None
        tokens = [_token(e) for e in content]
        lps = [float(e["logprob"]) for e in content]
        # the likeliest listed, whatever order the server lists them in
        top = [_token(max(e["top_logprobs"], key=lambda t: float(t["logprob"]))) for e in content]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return tokens, lps, top


def _kind_of_status(status: int) -> str:
    if status == 429:
        return "http_429"
    if status == 408:
        return "timeout"
    if status >= 500:
        return "http_5xx"
    return "http_4xx"


class ChatClient:
    def __init__(self, cfg: OpenAIParams, pool: EndpointPool, api_key: str | None, opened: bool = False,
                 token_ids: bool = False):
        """opened: the generation prompt leaves a reasoning block open (answer.split_reasoning);
        token_ids: keep the generated ids a server returns with `return_token_ids`."""
        self.cfg = cfg
        self.pool = pool
        self.opened, self.token_ids = opened, token_ids
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.retries: Counter[str] = Counter()
        self.requests = 0
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "ChatClient":
        # No connector-wide cap: the pool bounds requests per endpoint.
        conn = aiohttp.TCPConnector(limit=0, limit_per_host=0, enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_s, sock_connect=self.cfg.connect_timeout_s)
        self.session = aiohttp.ClientSession(connector=conn, timeout=timeout, headers=self._headers)
        return self

    async def __aexit__(self, *exc) -> None:
        await self.session.close()

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        # Capped exponential backoff with "equal jitter": half fixed, half random, so
        # thousands of rows that failed together do not come back together.
        cap = min(self.cfg.backoff_s * 2 ** (attempt - 1), self.cfg.backoff_max_s)
        delay = cap / 2 + random.random() * cap / 2
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.cfg.backoff_max_s))
        return delay

    async def _post_once(self, url: str, payload: bytes) -> tuple[str, dict | str, float | None]:
        """One HTTP attempt -> ("ok", json, None) or (kind, reason, retry_after)."""
        try:
            async with self.session.post(url + "/chat/completions", data=payload) as resp:
                raw = await resp.read()
                if resp.status in (401, 403):
                    raise EndpointError(f"{url}: HTTP {resp.status} (key rejected; check regenerate.openai.api_key_env)")
                if resp.status != 200:
                    ra = resp.headers.get("Retry-After")
                    retry_after = float(ra) if ra and ra.replace(".", "", 1).isdigit() else None
                    return _kind_of_status(resp.status), f"HTTP {resp.status}: {_excerpt(raw, 300)}", retry_after
        except (asyncio.TimeoutError, TimeoutError):
            return "timeout", f"no answer within {self.cfg.timeout_s:g}s", None
        except aiohttp.ClientError as err:
            return "connection", f"{type(err).__name__}: {err}", None
        except OSError as err:
            return "connection", f"{type(err).__name__}: {err}", None
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or not data.get("choices"):
                return "malformed", f"no choices in response: {_excerpt(raw, 200)!r}", None
            return "ok", data, None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "malformed", f"not JSON: {_excerpt(raw, 200)!r}", None

    def _parse(self, data: dict, url: str) -> Answer:
        try:
            choice = data["choices"][0]
            msg = choice["message"]
            text = msg.get("content") or ""
            reasoning = next((msg[f] for f in self.cfg.reasoning_fields if msg.get(f)), None)
            usage = data.get("usage") or {}
            finish = choice.get("finish_reason") or "stop"
            prompt_tokens = int(usage.get("prompt_tokens") or 0)
            completion_tokens = int(usage.get("completion_tokens") or 0)
            ids = choice.get("token_ids") if self.token_ids else None
            scores = parse_logprobs(choice)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as err:
            raise ValueError(f"unexpected response shape ({type(err).__name__}: {err})") from None
        if not isinstance(text, str):
            raise ValueError("message content is not text")
        if ids is not None and not (isinstance(ids, list) and all(type(t) is int for t in ids)):
            raise ValueError("choice token_ids is not a list of token ids")
        text, reasoning = split_reasoning(text, reasoning, self.opened)
        # The answer goes into the training data: a key echoed in it goes no further, nor do
        # the ids that spell it.
        masked = secrets.mask(text)
        masked_reasoning = secrets.mask(reasoning) if isinstance(reasoning, str) else reasoning
        if masked != text or masked_reasoning != reasoning:
            ids = scores = None
        if scores and any(secrets.mask(spelt := "".join(names)) != spelt for names in (scores[0], scores[2])):
            scores = None  # the tokens that would spell it
        served = data.get("model")
        tokens, logprobs, top1 = scores or (None, None, None)
        return Answer(text=masked, reasoning=masked_reasoning, finish_reason=finish, prompt_tokens=prompt_tokens,
                      completion_tokens=completion_tokens, endpoint=url, token_ids=ids,
                      served_model=secrets.mask(served) if isinstance(served, str) else served,
                      logprob_tokens=tokens, logprobs=logprobs, top1=top1)

    async def chat(self, body: dict) -> Answer:
        payload = json.dumps(body, ensure_ascii=False).encode()
        kind, reason, retry_after = "connection", "no attempt", None
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                self.retries[kind] += 1
                await asyncio.sleep(self._backoff(attempt, retry_after))
            ep = await self.pool.acquire()
            self.requests += 1
            ok = False
            try:
                kind, result, retry_after = await self._post_once(ep.url, payload)
                if kind == "ok":
                    try:
                        answer = self._parse(result, ep.url)
                        ok = True
                        return answer
                    except ValueError as err:
                        kind, reason = "malformed", str(err)
                else:
                    reason = result
            finally:
                await self.pool.release(ep, ok, connection_failed=kind == "connection")
            if kind not in RETRYABLE:
                break
        raise RowFailure(kind, f"{reason} (after {attempt + 1} attempts)", attempt + 1)

    async def served_models(self, url: str, deadline: float, alive=None) -> list[str] | None:
        """Wait until `url` answers GET /models; its model ids, or None if it has no such route."""
        last = "no attempt"
        while True:
            if alive is not None and (dead := alive()):
                raise EndpointError(f"{url}: the launched server stopped before it was healthy: {dead}")
            try:
                async with self.session.get(url + "/models", timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    raw = await resp.read()
                    if resp.status in (401, 403):
                        raise EndpointError(f"{url}: HTTP {resp.status} (key rejected; check regenerate.openai.api_key_env)")
                    if resp.status == 404:
                        return None
                    if resp.status == 200:
                        return [m["id"] for m in json.loads(raw).get("data", [])]
                    last = f"HTTP {resp.status}"
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError, TimeoutError, json.JSONDecodeError,
                    KeyError, TypeError, AttributeError) as err:
                last = f"{type(err).__name__}: {err}"
            if time.monotonic() > deadline:
                raise EndpointError(f"{url}: not reachable within the startup timeout ({last})")
            await asyncio.sleep(0.5)
