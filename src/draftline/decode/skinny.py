"""Products over the few rows one decoding step feeds a layer, on a CPU.

One-sequence decoding pushes 1-4 rows through every linear layer per step (a plain decode's
one token, the drafter's block, the verify rows) and through the LM head. torch's `linear`
takes slow paths there: a single-threaded GEMV for one row, and for a strided 3-D slice
(the drafter's `h[:, 1:, :]`) a batched matmul over a broadcast weight, 33 ms for the
49K-row head over 3 rows against 4.5 ms as `W @ x.T`. `skinny_product` computes that form,
which runs on every thread, a lone row widened to `MIN_ROWS` columns (wider is slower
here); `skinny_linears` routes a model's `nn.Linear` layers through it while decoding:
plain decoding 1.45x and the chain's steps 1.5x faster (`bench/bench_skinny.py`).
Other devices, and many rows, use `linear`.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

SKINNY_ROWS = 8
MIN_ROWS = 2


def skinny_product(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """rows [..., H] -> [..., O] with `weight` [O, H]: `F.linear(rows, weight, bias)`."""
    x = rows.reshape(-1, rows.shape[-1])
    n = x.shape[0]
    if weight.device.type != "cpu" or n > SKINNY_ROWS or n == 0:
        out = F.linear(x, weight, bias)
    else:
        wide = torch.cat([x, x[-1:].expand(MIN_ROWS - n, -1)]) if n < MIN_ROWS else x
        out = (weight @ wide.T).T[:n].contiguous()  # row-major, as `linear` returns (sdpa's flash kernel needs it)
        if bias is not None:
            out = out + bias
    return out.reshape(*rows.shape[:-1], weight.shape[0])


def head_logits(weight: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """rows [..., H] -> logits [..., V] with the head `weight` [V, H] (no bias)."""
    return skinny_product(rows, weight)


class SkinnyHead:
    """`head_logits` as a module-like callable (what z-lab's `compute_logits` calls)."""

    def __init__(self, head):
        self.weight = head.weight

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        return head_logits(self.weight, rows)


def _forward(module: nn.Linear):
    return lambda x: skinny_product(x, module.weight, module.bias)


@contextmanager
def skinny_linears(*models: nn.Module):
    """Route every `nn.Linear` of `models` through `skinny_product` inside the block (the
    models' own classes and weights stay as they are)."""
    patched = [m for model in models for m in model.modules() if type(m) is nn.Linear]
    for m in patched:
        m.forward = _forward(m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward
