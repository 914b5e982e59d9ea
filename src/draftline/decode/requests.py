"""The benchmark's requests: the first `prompts_per_source` held-out prompts of every eval
source, each user turn of a multi-turn prompt a request of its own; a later turn follows
the target's own greedy answer to the earlier ones. Prompts are rendered with the `chat`
template kwargs, so the benchmark decodes with the thinking setting regeneration used."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ..prompts.heldout import eval_order
from .chain import plain
from .reasoning import reasoning_split
from .verify import Decoded

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.benchmark import BenchmarkParams


@dataclass
class Request:
    source: str
    id: str
    turn: int
    messages: list[dict]
    input_ids: torch.Tensor = field(repr=False, default=None)
    # The target's greedy answer, when it was decoded to build the next turn: the
    # benchmark's target-alone run of this request reuses it instead of decoding it again.
    answer: Decoded | None = field(repr=False, default=None)


def select_prompts(prompts: list[dict], per_source: int) -> list[dict]:
    by_src: dict[str, list[dict]] = {}
    for p in prompts:
        by_src.setdefault(p["source"], []).append(p)
    out = []
    for src in sorted(by_src):
        out.extend(sorted(by_src[src], key=eval_order)[:per_source])
    return out


def first_turn(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        out.append(m)
        if m["role"] == "user":
            break
    return out


def encode_prompt(tok, messages: list[dict], template_kwargs: dict | None = None) -> torch.Tensor:
    enc = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                  return_tensors="pt", **(template_kwargs or {}))
    return enc["input_ids"]


def user_turns(messages: list[dict]) -> list[list[dict]]:
    """Conversation prefixes ending at each user turn (given assistant turns dropped)."""
    system = [m for m in messages if m["role"] == "system"]
    users = [m for m in messages if m["role"] == "user"]
    return [system + users[: i + 1] for i in range(len(users))]


def build_requests(target, tok, prompts: list[dict], bp: BenchmarkParams, stop_ids: list[int],
                   template_kwargs: dict | None = None) -> list[Request]:
    """Every turn of every chosen prompt; turn n's history holds the target's greedy answers,
    their reasoning (if any) as `reasoning_content`, as a chat client sends them back."""
    template_kwargs = template_kwargs or {}
    split = reasoning_split(tok, template_kwargs)
    out = []
    warm = False
    for p in select_prompts(prompts, bp.prompts_per_source):
        history: list[dict] = []
        turns = user_turns(p["messages"])[: bp.max_turns]
        for t, prefix in enumerate(turns):
            msgs = history + [prefix[-1]] if t else prefix
            ids = encode_prompt(tok, msgs, template_kwargs).to(target.device)
            req = Request(p["source"], p["id"], t + 1, msgs, ids)
            out.append(req)
            if t + 1 < len(turns):
                if not warm:  # the answer's timing is reported: keep cold kernels out of it
                    plain(target, ids, 8, stop_ids)
                    warm = True
                req.answer = plain(target, ids, bp.max_new_tokens, stop_ids)
                answer = tok.decode(req.answer.tokens, skip_special_tokens=True)
                history = msgs + [split.history(req.answer.tokens) if split else
                                  {"role": "assistant", "content": answer}]
    return out
