"""Regeneration over OpenAI-compatible servers: async, many endpoints, faults recorded.

Each (prompt, sample) is one coroutine that asks its turns in order; as many run at once
as the endpoints accept in total, so a slow multi-turn row never holds up the others.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from .. import secrets
from ..config.chat import ChatParams
from ..config.regenerate import RegenerateParams
from .client import ChatClient, EndpointError, RowFailure
from .drive import Writer, next_turns
from .endpoints import EndpointPool
from .jobs import Job, error_row, make_row
from .servers import LaunchedServers


class OpenAIDriver:
    def __init__(self, params: RegenerateParams, log_dir: Path, chat: ChatParams | None = None,
                 opened: bool = False):
        """opened: the target's generation prompt leaves a reasoning block open (measured
        on the target's tokenizer, `chat.ChatTemplate.opens_reasoning`), so a turn cut before `</think>`
        by a server without a reasoning parser is still stored as reasoning."""
        self.p, self.cfg = params, params.openai
        self.chat = chat or ChatParams()
        self.opened = opened
        self.log_dir = log_dir
        self.key = None
        if self.cfg.api_key_env:
            self.key = os.environ.get(self.cfg.api_key_env)
            secrets.register(self.key)  # masked in every reason, metric, log and message from here on
            if not self.key:
                raise EndpointError(
                    f"regenerate.openai.api_key_env: environment variable {self.cfg.api_key_env} is not set")
        self.model: str | None = None
        self.pool: EndpointPool | None = None
        self.servers: LaunchedServers | None = None

    # -- lifecycle: launch (optional), health check, model check -----------------------
    def __enter__(self) -> "OpenAIDriver":
        if self.cfg.launch:
            self.servers = LaunchedServers(self.cfg.launch, self.log_dir).__enter__()
        try:
            self.model = asyncio.run(self._preflight())
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.servers is not None:
            self.servers.__exit__()
            self.servers = None

    def _alive(self) -> str | None:
        return self.servers.alive() if self.servers is not None else None

    async def _preflight(self) -> str:
        pool = EndpointPool(self.cfg.urls, 1)
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        async with ChatClient(self.cfg, pool, self.key) as c:
            served = await asyncio.gather(*(c.served_models(e.url, deadline, self._alive) for e in pool.endpoints))
        want = self.cfg.model
        listed = {e.url: s for e, s in zip(pool.endpoints, served) if s is not None}
        if want is None:
            ids = {m for s in listed.values() for m in s}
            if len(ids) != 1 or len(listed) != len(served):
                raise EndpointError(secrets.mask(f"regenerate.openai.model is not set and the endpoints do not list "
                                                 f"exactly one model ({ {u: s for u, s in listed.items()} }); set it"))
            return ids.pop()
        for url, s in listed.items():
            if want not in s:
                raise EndpointError(secrets.mask(f"regenerate.openai.model: '{want}' is not served by {url} "
                                                 f"(it serves {s})"))
        return want

    # -- the run ----------------------------------------------------------------------
    def in_flight(self) -> int:
        return self.pool.in_flight if self.pool is not None else 0

    def _body(self, conv: list[dict], seed: int, scored: bool = False) -> dict:
        """scored: a row of the agreement sample, asked for its tokens' log-probs."""
        p = self.p
        body = {"model": self.model, "messages": conv, "max_tokens": p.max_new_tokens,
                "temperature": p.temperature, "top_p": p.top_p, "seed": seed, "stream": False}
        if kw := self.chat.template_kwargs():
            # vLLM and SGLang pass these to the chat template (e.g. enable_thinking).
            body["chat_template_kwargs"] = kw
        if p.token_ids:
            # vLLM (0.10.2 on) answers with the choice's generated `token_ids`; others ignore it.
            body["return_token_ids"] = True
        if scored:
            # The raw distribution's log-prob of each generated token and the top-1 token
            # (vLLM, SGLang, llama.cpp); vLLM names the tokens by id when asked.
            body |= {"logprobs": True, "top_logprobs": 1}
            if p.token_ids:
                body["return_tokens_as_token_ids"] = True
        body.update(self.cfg.extra_body)
        return body

    async def _converse(self, client: ChatClient, job: Job, over=None):
        """The conversation, its answers and (turn, length) of a later turn that outgrew the context."""
        prompts, convs, cursor, answers, cut = [job.row["messages"]], [[]], [0], [], {}
        while next_turns(prompts, convs, cursor, over, cut):
            a = await client.chat(self._body(convs[0], (job.seed + len(answers)) & 0x7FFFFFFF, job.scored))
            convs[0].append(a.history())
            answers.append(a)
        return convs[0], answers, cut.get(0)

    async def _watch_servers(self) -> None:
        while self.servers is not None:
            if dead := self._alive():
                raise EndpointError(f"a launched server stopped during the run: {dead}")
            await asyncio.sleep(2.0)

    async def _run(self, todo: list[Job], settings: dict, w: Writer) -> dict:
        self.pool = EndpointPool(self.cfg.urls, self.cfg.max_in_flight)
        jobs = iter(todo)

        async def worker(client: ChatClient) -> None:
            for job in jobs:  # shared iterator: each job is taken by exactly one worker
                try:
                    conv, answers, cut = await self._converse(client, job, w.over)
                except RowFailure as f:
                    w.fail(error_row(job, f.kind, f.reason, f.attempts))
                    continue
                if cut is None or w.too_long(job, *cut):
                    w.add(make_row(job, conv, answers, settings))

        async with ChatClient(self.cfg, self.pool, self.key, opened=self.opened,
                              token_ids=self.p.token_ids) as client:
            tasks = [asyncio.create_task(worker(client)) for _ in range(min(self.pool.capacity, len(todo)))]
            watch = asyncio.create_task(self._watch_servers()) if self.servers else None
            try:
                pending = set(tasks) | ({watch} if watch else set())
                while not all(t.done() for t in tasks):
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for t in done:
                        if t.exception() is not None:
                            raise t.exception()
            finally:
                for t in [*tasks, *([watch] if watch else [])]:
                    t.cancel()
                await asyncio.gather(*tasks, *([watch] if watch else []), return_exceptions=True)
        return {"requests": client.requests, "retries": dict(client.retries), "model": self.model,
                "endpoints": self.pool.summary()}

    def run(self, todo: list[Job], settings: dict, w: Writer) -> dict:
        return asyncio.run(self._run(todo, settings, w))
