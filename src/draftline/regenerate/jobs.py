"""What regeneration has to do: one job per (prompt, sample), and the row it produces."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..config.chat import ChatParams

from ..config.regenerate import RegenerateParams
from .answer import Answer
from .store import row_key


@dataclass
class Job:
    key: str
    row: dict
    sample: int
    # Tokens of its widest generate call (its prompt at its last turn plus max_new_tokens
    # per turn), measured before batching; None when not measured.
    tokens: int | None = None
    # In the agreement sample: its backend records each generated token's log-prob.
    scored: bool = False

    @property
    def seed(self) -> int:
        # A request seed per (prompt, sample, settings): the same on every rerun and
        # every endpoint, so a resumed run asks exactly what an uninterrupted one would.
        return int(self.key[:8], 16) & 0x7FFFFFFF


# Columns added to answer rows since the first runs, with the value a row written before
# them reads as: resumed rows and earlier final files keep their keys (the column is not
# part of the key) and get it filled in on load. Recording log-probs changes no answer,
# so they are not part of the key either: a row of the agreement sample resumed without
# them is answered again (drive.answer_all), every other row is kept.
ADDED_COLUMNS = {"completion_ids": None, "completion_logprob_tokens": None, "completion_logprobs": None,
                 "completion_top1": None}


def settings_of(p: RegenerateParams, model: str | None = None, chat: ChatParams | None = None) -> dict:
    """The settings that change an answer (and so belong in the row key). The chat template
    kwargs are the resulting dict, so the same values give the same keys whether they were
    set under `regenerate` (before the `chat` section) or `chat`."""
    s = {"backend": p.backend, "max_new_tokens": p.max_new_tokens, "temperature": p.temperature,
         "top_p": p.top_p, "seed": p.seed,
         "chat_template_kwargs": (chat or ChatParams()).template_kwargs()}
    if p.backend == "openai":
        s["model"] = model
        s["extra_body"] = dict(p.openai.extra_body)
    return s


def make_jobs(rows: list[dict], p: RegenerateParams, settings: dict, target_fp: str) -> list[Job]:
    return [Job(row_key(r["messages"], s, settings, target_fp), r, s)
            for r in rows for s in range(p.samples_per_prompt)]


def sample_keys(keys: list[str], n: int) -> set[str]:
    """The agreement sample: the `n` smallest keys. A key hashes the prompt, the settings
    and `seed`, so the draw is seeded and the same on every rerun and resume."""
    return set(sorted(keys)[:n])


def empty_turn(messages: list[dict]) -> int | None:
    """Index of the first user turn with no text: not worth a request, recorded as an error."""
    for i, m in enumerate(messages):
        if m["role"] == "user" and not str(m.get("content") or "").strip():
            return i
    return None


def make_row(job: Job, conv: list[dict], answers: list[Answer], settings: dict) -> dict:
    """The stored row. Its messages hold each answer as `content` only: the reasoning sent
    back as `reasoning_content` for later turns lives in the `reasoning` column (one entry
    per assistant turn), so the messages' schema is the prompts' whatever the target did.
    `completion_ids`: per assistant turn the ids the target generated, or null where the
    backend did not say; null for the row when no turn has them. `completion_logprob_tokens`,
    `completion_logprobs`, `completion_top1` alike: what the backend recorded for the
    agreement check (answer.Answer), rows of its sample only."""
    r, last = job.row, answers[-1]
    flat = {f"gen_{k}": v for k, v in settings.items() if not isinstance(v, dict)}
    ids = [a.token_ids for a in answers]
    recorded = {f"completion_{f}": [getattr(a, f) for a in answers] for f in ("logprob_tokens", "logprobs", "top1")}
    return {
        "key": job.key, "id": r["id"], "source": r["source"], "category": r["category"],
        "split": r["split"], "sample": job.sample, "messages": [_stored(m) for m in conv],
        "completion": last.text, "reasoning": [a.reasoning for a in answers],
        "completion_ids": ids if any(i is not None for i in ids) else None,
        **{col: turns if any(x is not None for x in turns) else None for col, turns in recorded.items()},
        "finish_reason": [a.finish_reason for a in answers],
        "prompt_tokens": sum(a.prompt_tokens for a in answers),
        "completion_tokens": sum(a.completion_tokens for a in answers),
        "served_model": last.served_model, "endpoint": last.endpoint, "request_seed": job.seed,
        **flat, "gen_settings": json.dumps(settings, sort_keys=True),
    }


def _stored(message: dict) -> dict:
    if message["role"] == "assistant" and "reasoning_content" in message:
        return {k: v for k, v in message.items() if k != "reasoning_content"}
    return message


def error_row(job: Job, kind: str, reason: str, attempts: int) -> dict:
    return {"key": job.key, "id": job.row["id"], "source": job.row["source"], "sample": job.sample,
            "kind": kind, "reason": reason[:500], "attempts": attempts}
