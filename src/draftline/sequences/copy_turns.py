"""Synthetic copy turns: a second user turn asking for the answer again, answered verbatim.

The target often restates text already in its context (MT-Bench second turns that ask for
a rewrite, HumanEval answers that repeat the prompt's signature), where n-gram prompt
lookup wins and a drafter wins only if it learned to copy. Regenerated data holds few such
turns, and regenerating more costs target time. A copy turn costs none: the first answer is
appended again after a repeat/rewrite request, and extraction gives the target's own
states over it, so with `train.loss: kl` the labels are still the target's distributions
(on those positions its argmax is the copied token about 99% of the time,
bench/RESULTS.md). The conversation replaces the single-turn one under the same sequence
id, so anchor draws and the teacher cache key on it as before.
"""

from __future__ import annotations

import random


class CopyTurns:
    """Draws, row by row and in order, which single-turn training rows get a copy turn."""

    def __init__(self, fraction: float, requests: list[str], seed: int = 0):
        self.fraction, self.requests = fraction, list(requests)
        self.rng = random.Random(seed)

    def apply(self, row: dict) -> tuple[dict, bool]:
        """(the row, with a copy turn when drawn; whether one was added)."""
        msgs = list(row["messages"])
        single = [m["role"] for m in msgs] == ["user", "assistant"]
        # The draw happens only for eligible rows, so adding val or multi-turn rows to the
        # data does not change which training rows are picked before them.
        if self.fraction > 0 and row["split"] == "train" and single and self.rng.random() < self.fraction:
            request = self.rng.choice(self.requests)
            # The copy ends as the first answer did (truncated answers stay without a
            # terminator) and repeats its reasoning and generated ids.
            copied = {**row, "messages": msgs + [{"role": "user", "content": request}, dict(msgs[1])]}
            for col in ("finish_reason", "reasoning", "completion_ids"):
                if row.get(col) is not None:
                    copied[col] = list(row[col]) * 2
            return copied, True
        return row, False
