"""Drive a backend over all prompts: resumable, turn by turn, errors kept per row.

`answer_all` is the same for every backend: key every (prompt, sample), load what earlier
runs finished under the same key, hand the rest to the backend's driver, write finished
rows to shards as they come. The caller writes the final files and only then clears the
shards, so a kill at any point leaves either the shards or the finished files.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import bar
from .answer import Answer
from .jobs import ADDED_COLUMNS, Job, empty_turn, error_row, make_jobs, make_row, sample_keys, settings_of
from .store import ShardStore

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.regenerate import RegenerateParams


def next_turns(prompts: list[list[dict]], convs: list[list[dict]], cursor: list[int], over=None,
               cut: dict | None = None) -> list[int]:
    """Move system turns and the next user turn of each prompt into its conversation;
    the indices of conversations that now wait for an answer.

    over(conv) -> its length when it leaves no room for an answer, else None: a later turn
    it rejects ends that conversation before the turn, and cut[i] = (turn, length)."""
    active = []
    for i, msgs in enumerate(prompts):
        j, start = cursor[i], len(convs[i])
        while j < len(msgs) and msgs[j]["role"] != "user":
            convs[i].append(msgs[j])
            j += 1
        if j < len(msgs):
            convs[i].append(msgs[j])
            j += 1
            # The first turn was measured before batching; later ones hold the target's answers.
            if over is not None and start and (n := over(convs[i])) is not None:
                del convs[i][start:]
                cut[i] = (sum(m["role"] == "user" for m in msgs[:j]), n)
                j = len(msgs)
            else:
                active.append(i)
        cursor[i] = j
    return active


def converse(backend, prompts: list[list[dict]], seeds: list[int], over=None,
             cut: dict | None = None, scored: list[bool] | None = None) -> list[tuple[list[dict], list[Answer]]]:
    """Answer a batch of conversations one user turn at a time, feeding back the target's
    own previous answers (with their reasoning: `Answer.history`): the history the target
    sees at inference, not someone else's.
    seeds: one per prompt, the same for each of its turns. over, cut: as in next_turns.
    scored: the prompts whose answers record their tokens' log-probs (none when None)."""
    convs: list[list[dict]] = [[] for _ in prompts]
    answers: list[list[Answer]] = [[] for _ in prompts]
    cursor = [0] * len(prompts)
    while active := next_turns(prompts, convs, cursor, over, cut):
        asked = [convs[i] for i in active], [seeds[i] for i in active]
        if scored is not None and any(scored[i] for i in active):
            got = backend.generate(*asked, scored=[scored[i] for i in active])
        else:
            got = backend.generate(*asked)
        for i, a in zip(active, got):
            convs[i].append(a.history())
            answers[i].append(a)
    return list(zip(convs, answers))


@dataclass
class Writer:
    """Collects finished rows into shards of `shard_rows`, or every `flush_s` seconds."""

    store: ShardStore
    done: dict[str, dict]
    shard_rows: int
    flush_s: float
    pb: object
    in_flight: object = None  # callable -> int, for the progress bar
    limit: object = None  # a context.PromptLimit: later turns measured as they are asked
    errors: list[dict] = field(default_factory=list)
    tokens: int = 0
    rows: int = 0
    _buf: list[dict] = field(default_factory=list)
    _t0: float = field(default_factory=time.perf_counter)
    _last_flush: float = field(default_factory=time.monotonic)
    _last_post: float = 0.0

    def add(self, row: dict) -> None:
        self._buf.append(row)
        self.tokens += row["completion_tokens"]
        self.rows += 1
        self.pb.update(1)
        if len(self._buf) >= self.shard_rows or time.monotonic() - self._last_flush > self.flush_s:
            self.flush()
        self._postfix()

    def fail(self, err: dict) -> None:
        self.errors.append(err)
        self.pb.update(1)
        self._postfix()

    def over(self, conv: list[dict]) -> int | None:
        return self.limit.over(conv) if self.limit is not None else None

    def too_long(self, job: Job, turn: int, tokens: int) -> bool:
        """A later turn outgrew the context (the limit names and lists the row); False when
        the row is dropped, True when it is kept, ended before that turn."""
        if self.limit.later(job, turn, tokens)["action"] != "dropped":
            return True
        self.pb.update(1)
        return False

    def _postfix(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_post > 0.5:
            self._last_post = now
            post = {"tok_s": f"{self.tokens / max(time.perf_counter() - self._t0, 1e-9):.0f}",
                    "errors": len(self.errors)}
            if self.in_flight is not None:
                post["in_flight"] = self.in_flight()
            self.pb.set_postfix(post, refresh=False)

    def refresh(self) -> None:
        """Post the rate now: rows of a batch land within the postfix's throttle, which
        would otherwise leave the rate of the batch's first row on screen."""
        self._postfix(force=True)

    def flush(self) -> None:
        self.store.append(self._buf)
        for row in self._buf:
            self.done[row["key"]] = row
        self._buf = []
        self._last_flush = time.monotonic()


def token_batches(jobs: list[Job], batch_size: int, batch_tokens: int | None = None) -> list[list[Job]]:
    """Consecutive jobs in batches of at most batch_size rows and batch_tokens tokens, counted
    as rows x the widest row's `Job.tokens` (what padding makes of them); a row wider than
    batch_tokens runs alone. Unmeasured jobs count no tokens."""
    batches: list[list[Job]] = []
    part: list[Job] = []
    width = 0
    for j in jobs:
        w = max(width, j.tokens or 0)
        if part and (len(part) == batch_size or (batch_tokens is not None and (len(part) + 1) * w > batch_tokens)):
            batches.append(part)
            part, w = [], j.tokens or 0
        part.append(j)
        width = w
    return batches + [part] if part else batches


class HFDriver:
    """In-process transformers generation, batched by prompt length."""

    model = None

    def __init__(self, backend, batch_size: int, batch_tokens: int | None = None):
        self.backend, self.batch_size, self.batch_tokens = backend, batch_size, batch_tokens
        # What the template is called with: part of every row's key.
        self.chat = getattr(backend, "chat", None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def run(self, todo: list[Job], settings: dict, w: Writer) -> dict:
        # Conversations with as many user turns together (a batch runs one generate call per
        # turn, and a second round for a few rows costs almost what a full one does), then
        # similar lengths together: less padding per batch.
        todo = sorted(todo, key=lambda j: (sum(m["role"] == "user" for m in j.row["messages"]),
                                           sum(len(m["content"]) for m in j.row["messages"])))
        calls = 0
        for part in token_batches(todo, self.batch_size, self.batch_tokens):
            cut: dict = {}
            for k, (job, (conv, answers)) in enumerate(zip(part, converse(
                    self.backend, [j.row["messages"] for j in part], [j.seed for j in part], w.over, cut,
                    [j.scored for j in part]))):
                calls += len(answers)
                if k not in cut or w.too_long(job, *cut[k]):
                    w.add(make_row(job, conv, answers, settings))
            w.refresh()
        return {"requests": calls}


@dataclass
class Outcome:
    rows: list[dict]  # every finished row, in prompt order
    errors: list[dict]
    stats: dict
    long: list[dict] = field(default_factory=list)  # rows over the context, dropped or cut (context.LONG_SCHEMA)
    sample: set[str] = field(default_factory=set)  # keys of the agreement sample (jobs.sample_keys)


def answer_all(rows: list[dict], driver, params: RegenerateParams, target_fp: str, work: Path,
               finished: list[Path] = (), limit=None) -> Outcome:
    """limit: a context.PromptLimit; every prompt is measured (and dropped or cut) before
    any batch, and later turns as they are asked. None: nothing is measured."""
    with driver:
        # The chat settings come from the driver, so the keys say what was actually sent.
        settings = settings_of(params, driver.model, getattr(driver, "chat", None))
        every = make_jobs(rows, params, settings, target_fp)
        jobs = limit.check(every) if limit is not None else every
        sample = sample_keys([j.key for j in jobs], params.check_rows)
        for j in jobs:
            j.scored = j.key in sample
        store = ShardStore(work)
        done = store.load({j.key for j in jobs}, list(finished))
        for row in done.values():  # rows written before a column existed read it as null
            for col, value in ADDED_COLUMNS.items():
                row.setdefault(col, value)
        # A sampled row answered before log-probs were recorded is answered again: it cannot
        # be checked otherwise, and the sample is a few rows.
        unscored = [k for k in sample if k in done and done[k]["completion_logprobs"] is None]
        for k in unscored:
            del done[k]
        resumed = len(done)
        pb = bar(len(jobs), "regenerate", unit="row")
        pb.update(resumed)
        w = Writer(store, done, params.shard_rows, params.flush_s, pb,
                   in_flight=getattr(driver, "in_flight", None), limit=limit)
        todo = []
        for j in jobs:
            if j.key in done:
                if limit is not None:
                    limit.resumed(j, done[j.key])
                continue
            if (t := empty_turn(j.row["messages"])) is not None:
                w.fail(error_row(j, "empty_prompt", f"user turn {t} has no text", 0))
            else:
                todo.append(j)
        t0 = time.perf_counter()
        try:
            driver_stats = driver.run(todo, settings, w)
        finally:
            w.flush()  # whatever finished before a failure is kept for the rerun
            w._postfix(force=True)
            pb.close()
        elapsed = time.perf_counter() - t0
    out = [done[j.key] for j in jobs if j.key in done]
    stats = {"rows_resumed": resumed, "check_rows_answered_again": len(unscored),
             "rows_generated": w.rows, "generated_tokens": w.tokens, "generate_seconds": round(elapsed, 2),
             "tokens_per_second": round(w.tokens / elapsed, 2) if elapsed > 0 and w.rows else None,
             "rows_per_second": round(w.rows / elapsed, 3) if elapsed > 0 and w.rows else None,
             **driver_stats}
    order = {j.key: i for i, j in enumerate(every)}
    long = sorted(limit.events, key=lambda e: order[e["key"]]) if limit is not None else []
    return Outcome(out, w.errors, stats, long, sample)
