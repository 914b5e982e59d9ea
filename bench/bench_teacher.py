"""Top-k teachers of the training sequences: `top_k_teacher` against casting the head on
every call and widening the whole logits block before top-k (the previous code), same
process, alternating. Both give the same ids and values (checked).

    .venv/bin/python bench/bench_teacher.py [N]     # N training sequences (default 128); needs `make all` first
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F
from _setup import load_io_weights, load_params, train_sequences

from draftline.drafter.loss import CHUNK, SparseTeacher, top_k_teacher
from draftline.precision import bf16_units

REPS = 3


def widened_per_call(final: torch.Tensor, head_w: torch.Tensor, k: int, dtype: torch.dtype) -> SparseTeacher:
    w = head_w.to(dtype)
    ids = torch.empty(final.shape[0], k, dtype=torch.long)
    vals = torch.empty(final.shape[0], k)
    for s in range(0, final.shape[0], CHUNK):
        top = F.linear(final[s : s + CHUNK].to(dtype), w).float().topk(k, dim=-1)
        vals[s : s + CHUNK], ids[s : s + CHUNK] = top.values, top.indices
    return SparseTeacher(ids, vals)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    k = load_params().train.kl_top_k or 32
    _, head_w = load_io_weights()
    seqs = train_sequences()[:n]
    dtype = torch.bfloat16 if bf16_units() else torch.float32
    head_c = head_w.to(dtype)
    old, new = [], []
    for _ in range(REPS):
        t = time.perf_counter()
        a = [widened_per_call(s.final, head_w, k, dtype) for s in seqs]
        old.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = [top_k_teacher(s.final, head_c, k) for s in seqs]
        new.append(time.perf_counter() - t)
        assert all(torch.equal(x.vals, y.vals) and torch.equal(x.ids, y.ids) for x, y in zip(a, b))
    tokens = sum(s.final.shape[0] for s in seqs)
    o, m = statistics.median(old), statistics.median(new)
    print(f"{len(seqs)} sequences, {tokens} tokens, top-{k}, {dtype}: head cast per call + widened logits "
          f"{o:.2f} s, top_k_teacher {m:.2f} s, {o / m:.2f}x faster")


if __name__ == "__main__":
    main()
