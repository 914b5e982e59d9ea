"""Which sequences form each optimizer step, and which anchors each sequence gets.

Everything here is a pure function of (seed, epoch, sequence id): no random state carries
from one step to the next. So a resumed run sees exactly the batches and anchors an
uninterrupted one would, and any number of processes splits the same global batches.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

import torch


def _seed_of(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "little")


def anchor_generator(seed: int, epoch: int, seq_id: str) -> torch.Generator:
    return torch.Generator().manual_seed(_seed_of("anchors", seed, epoch, seq_id) & ((1 << 63) - 1))


def epoch_batches(lengths: list[int], ids: list[str], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Global batches of `batch_size` sequences of similar length, in a per-epoch order.

    Sorting by length keeps padding low; shuffling the batch order (not their contents)
    still gives every epoch a new order. The last, smaller batch is kept.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], ids[i]))
    out = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    random.Random(_seed_of("batches", seed, epoch)).shuffle(out)
    return out


def micro_batches(batch: list[int], rank: int, world: int, accum: int) -> list[list[int]]:
    """This process's micro-batches of a global batch.

    The global batch (sorted by length) is cut into world * accum contiguous parts; rank r
    takes parts r*accum .. r*accum + accum - 1. One process with accum = k and k processes
    with accum = 1 therefore compute the very same micro-batches.
    """
    parts = world * accum
    n = len(batch)
    bounds = [round(i * n / parts) for i in range(parts + 1)]
    mine = [batch[bounds[j] : bounds[j + 1]] for j in range(rank * accum, (rank + 1) * accum)]
    return [m for m in mine if m]


@dataclass
class Padding:
    real: int = 0
    padded: int = 0

    def add(self, lengths: list[int]) -> None:
        if lengths:
            self.real += sum(lengths)
            self.padded += max(lengths) * len(lengths)

    @property
    def fraction(self) -> float:
        return 1 - self.real / self.padded if self.padded else 0.0
