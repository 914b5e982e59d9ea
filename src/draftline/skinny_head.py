"""The LM head over the few rows one decoding step needs.

One-sequence decoding applies the 49K x 576 LM head to 1-4 rows per step (the drafter's
block, the verify rows greedy verification reads, a plain decode's last position). On a
CPU torch's `linear` takes slow paths there: a single-threaded GEMV for one row, and for a
strided 3-D slice (the drafter's `h[:, 1:, :]`) a batched matmul over a broadcast weight,
33 ms for 3 rows against 4.5 ms for the same product as `W @ x.T`, and the chain's
verify steps 1.40x faster (`bench/bench_skinny_head.py`). `head_logits` computes the product that way, a lone row
doubled so the GEMM runs on every thread. Every decoder here (plain, speculative, tree)
takes its target logits from it, so a verify row and a plain decode step of the same
state round alike. Other devices, and many rows, use `linear`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SKINNY_ROWS = 8


def head_logits(weight: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """rows [..., H] -> logits [..., V] with the head `weight` [V, H] (no bias)."""
    x = rows.reshape(-1, rows.shape[-1])
    n = x.shape[0]
    if weight.device.type != "cpu" or n > SKINNY_ROWS:
        out = F.linear(x, weight)
    else:
        pair = torch.cat([x, x]) if n == 1 else x
        out = (weight @ pair.T).T[:n]
    return out.reshape(*rows.shape[:-1], weight.shape[0])


class SkinnyHead:
    """`head_logits` as a module-like callable (what z-lab's `compute_logits` calls)."""

    def __init__(self, head):
        self.weight = head.weight

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        return head_logits(self.weight, rows)
