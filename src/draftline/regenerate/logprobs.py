"""What a backend records about each token it generates, for the agreement check.

Per generated token: its log-prob under the backend's raw distribution (before
temperature and top-p) and the backend's own top-1 token. A token is named as vLLM names
it with `return_tokens_as_token_ids` (`token_id:N`) where the id is known, else by its
text (llama.cpp, SGLang); agreement.py compares either.
"""

from __future__ import annotations

import re

import torch
from transformers import LogitsProcessor

_ID = re.compile(r"token_id:(\d+)")


def token_name(token_id: int) -> str:
    return f"token_id:{token_id}"


def named_id(name: str) -> int | None:
    """The id a token name spells, None for a token named by its text."""
    m = _ID.fullmatch(name)
    return int(m.group(1)) if m else None


class LogprobRecorder(LogitsProcessor):
    """Records, for the batch rows in `rows`, each step's log-prob of the emitted token and
    the top-1 token; the scores pass through unchanged, so what is generated is not.

    Pass it first: it then sees the model's logits before NucleusSampler replaces them
    (transformers runs the processors it builds from the target's generation_config, a
    repetition penalty say, before any passed in). The token a step emits is known only
    at the next step (the last step's from generate's output: `finish`), so one step's
    log-probs are kept, for the sampled rows only: never the whole vocabulary of every
    step, which at a batch of 64 and 128 steps would be gigabytes."""

    def __init__(self, rows: list[int]):
        self.rows = rows
        self._prev: torch.Tensor | None = None  # [len(rows), vocab] log-probs of the previous step
        self._picked: list[torch.Tensor] = []
        self._top: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self._prev is not None:
            self._take(input_ids[:, -1])
        rows = torch.tensor(self.rows, device=scores.device)
        self._prev = torch.log_softmax(scores.index_select(0, rows).float(), dim=-1)
        self._top.append(self._prev.argmax(-1).cpu())
        return scores

    def _take(self, emitted: torch.Tensor) -> None:
        rows = torch.tensor(self.rows, device=emitted.device)
        token = emitted.index_select(0, rows).to(self._prev.device)
        self._picked.append(self._prev.gather(-1, token[:, None])[:, 0].cpu())
        self._prev = None

    def finish(self, sequences: torch.Tensor) -> tuple[list[list[float]], list[list[str]]]:
        """(log-probs of the emitted tokens, top-1 names) per recorded row and step;
        `sequences`: generate's output."""
        if self._prev is not None:
            self._take(sequences[:, -1])
        if not self._top:
            return [[] for _ in self.rows], [[] for _ in self.rows]
        picked, top = torch.stack(self._picked, 1), torch.stack(self._top, 1)
        return picked.tolist(), [[token_name(t) for t in row] for row in top.tolist()]
