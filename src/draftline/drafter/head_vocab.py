"""The vocabulary the drafter's softmax runs over while it trains.

The frozen LM head (49K rows for SmolLM2, 150K+ for Qwen3) is most of a training step's
cost, yet the target's answers in a training set use a few thousand distinct tokens. With
`train.head_vocab: N` the training loss normalises over the N tokens most frequent in the
training sequences instead of the whole vocabulary: a sampled softmax with a fixed
candidate set, as EAGLE-3's draft vocabulary does, except that the exported drafter keeps
the target's full head (z-lab's `DFlashDraftModel` has no draft-vocabulary mapping). So
evaluation always scores the full head: the held-out accuracy and tau estimate show any
token outside the set that the drafter would wrongly pick at inference.

A label outside the set drops out of the CE term; the teacher's probabilities are
renormalised over the set (the KL term), so the student learns the target's distribution
restricted to the tokens it can meet.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class HeadVocab:
    ids: torch.Tensor  # [V'] token ids, ascending
    index: torch.Tensor  # [V] position of each token id in `ids`, -1 outside

    @classmethod
    def frequent(cls, token_ids, size: int, vocab_size: int) -> "HeadVocab":
        """The `size` most frequent token ids over every position of the training sequences,
        `token_ids` yielding (id, input_ids) for each (ties by id).

        Prompt tokens count too: they widen the set towards what the target may say about
        them. Deterministic, so every process of a distributed run builds the same set."""
        counts = torch.zeros(vocab_size, dtype=torch.long)
        for seq_id, ids in token_ids:
            ids = ids.long()
            if int(ids.max()) >= vocab_size:
                raise ValueError(f"sequence {seq_id}: token id {int(ids.max())} outside the vocabulary ({vocab_size})")
            counts += torch.bincount(ids, minlength=vocab_size)
        seen = int((counts > 0).sum())
        # stable sort on -count keeps ascending ids among equal counts
        order = torch.sort(-counts, stable=True).indices[: min(size, seen)]
        return cls.of(order.sort().values, vocab_size)

    @classmethod
    def of(cls, ids: torch.Tensor, vocab_size: int) -> "HeadVocab":
        index = torch.full((vocab_size,), -1, dtype=torch.long)
        index[ids] = torch.arange(ids.numel())
        return cls(ids, index)

    def __len__(self) -> int:
        return self.ids.numel()

    def to(self, device) -> "HeadVocab":
        return HeadVocab(self.ids.to(device), self.index.to(device))
