"""Decode the doctor's prompts with a served drafter, by both decoders, and judge the blocks.

A served drafter is what an engine gets: the export read back from its config.json and
weights (`load_drafter`), at the block size the engine will draft (vLLM's
num_speculative_tokens + 1; SGLang's draft tokens). Each prompt is decoded for exactly as
many tokens as the drafter was trained on, greedily, by the benchmark's decoder
(decode/chain.py) and by z-lab's `dflash_generate`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..decode.chain import speculative
from .rows import DoctorRow


@dataclass(frozen=True)
class Decode:
    tokens: list[int]
    acceptance_lengths: list[int]  # tokens produced per verify step, the bonus included


@dataclass(frozen=True)
class Probe:
    block_size: int
    ours: list[Decode]  # the benchmark's decoder, per row
    zlab: list[Decode] | None  # z-lab's dflash_generate, per row (None: not run)
    expected: list[list[int]]  # the continuation each row was trained on

    def short_blocks(self, decodes: list[Decode] | None = None) -> list[tuple[int, int, int, int]]:
        """(row, step, produced, possible) of every verify step that did not accept its
        whole block (the last step of a row may be cut short by the length; that is not)."""
        out = []
        for r, (d, want) in enumerate(zip(decodes or self.ours, self.expected)):
            left = len(want) - 1  # the prefill gives the first token; the steps the rest
            for s, produced in enumerate(d.acceptance_lengths):
                possible = min(self.block_size, left)
                if produced < possible:
                    out.append((r, s, produced, possible))
                left -= produced
        return out

    @property
    def fully_accepted(self) -> bool:
        return not self.short_blocks() and all(d.tokens == w for d, w in zip(self.ours, self.expected))

    def disagreements(self) -> list[int]:
        """Rows whose tokens or acceptance lengths differ between the two decoders."""
        if self.zlab is None:
            return []
        return [r for r, (a, b) in enumerate(zip(self.ours, self.zlab)) if a != b]

    def tau(self) -> float:
        lengths = [n for d in self.ours for n in d.acceptance_lengths]
        return sum(lengths) / max(1, len(lengths))


@contextmanager
def _cpu_clock():
    """dflash_generate times itself with torch.cuda.synchronize(); on a CPU, the plain clock."""
    import dflash.model as zlab

    saved = zlab._cuda_time
    if not torch.cuda.is_available():
        zlab._cuda_time = time.perf_counter
    try:
        yield zlab
    finally:
        zlab._cuda_time = saved


def probe(drafter, target, rows: list[DoctorRow], block_size: int, with_zlab: bool = True) -> Probe:
    dev = target.device
    drafter = drafter.to(dev)
    ours, theirs = [], []
    for row in rows:
        ids = torch.tensor([row.prompt], device=dev)
        n = len(row.continuation)
        d = speculative(drafter, target, ids, n, [], block_size=block_size)
        ours.append(Decode(d.tokens, list(d.acceptance_lengths)))
        if with_zlab:
            with _cpu_clock() as zlab:
                ref = zlab.dflash_generate(drafter, target, ids, n, [], block_size=block_size, return_stats=True)
            theirs.append(Decode(ref.output_ids[0, ids.shape[1]:].tolist(), [int(x) for x in ref.acceptance_lengths]))
    return Probe(block_size, ours, theirs if with_zlab else None, [r.continuation for r in rows])
