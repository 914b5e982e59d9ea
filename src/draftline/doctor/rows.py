"""The rows the doctor overfits: prompts of the pipeline's tokenized data, each followed by
the target's own greedy continuation.

The stored answers were sampled (or written by a server); a drafter can be fully accepted
only on what greedy verification will produce, so the doctor asks the target for that
continuation itself and trains on prompt + continuation, the continuation supervised.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..decode.chain import greedy
from ..io import read_parquet


@dataclass(frozen=True)
class DoctorRow:
    id: str
    prompt: list[int]  # the row's tokens before its first supervised one: template and user turn
    continuation: list[int]  # the target's greedy tokens after it

    def as_tokens(self) -> dict:
        """In the tokenize stage's row format, as extraction reads it."""
        return {"id": self.id, "split": "train", "input_ids": self.prompt + self.continuation,
                "loss_mask": [0] * len(self.prompt) + [1] * len(self.continuation)}


def prompts(tokens: Path, n_rows: int, max_prompt_tokens: int) -> list[tuple[str, list[int]]]:
    """The first `n_rows` training rows whose prompt (up to the first supervised token) is
    at most `max_prompt_tokens` long: short rows keep the doctor to minutes on a CPU."""
    chosen = []
    for row in read_parquet(tokens):
        if row.get("split", "train") != "train" or 1 not in row["loss_mask"]:
            continue
        cut = row["loss_mask"].index(1)
        if 0 < cut <= max_prompt_tokens:
            chosen.append((str(row["id"]), list(row["input_ids"][:cut])))
        if len(chosen) == n_rows:
            return chosen
    if not chosen:
        raise ValueError(f"{tokens}: no training row with a prompt of at most {max_prompt_tokens} tokens "
                         "(--max-prompt-tokens)")
    return chosen


def with_continuations(target, chosen: list[tuple[str, list[int]]], new_tokens: int) -> list[DoctorRow]:
    """Each prompt with the target's next `new_tokens` greedy tokens (no stop token: the
    decoders are asked for exactly as many)."""
    device = target.device
    out = []
    for row_id, prompt in chosen:
        ids = torch.tensor([prompt], device=device)
        out.append(DoctorRow(row_id, prompt, greedy(target, ids, new_tokens, []).tokens))
    return out
