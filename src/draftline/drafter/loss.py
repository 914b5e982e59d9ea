"""Drafter losses over supervised slots only.

Only slots with weight > 0 reach the LM head, gathered into one contiguous [N, H] matrix:
the 49K-row head dominates a step, and a strided view of it runs several times slower.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def select(hidden: torch.Tensor, weights: torch.Tensor, block_size: int):
    """hidden [b, A*B, H] -> rows for slots 1..B-1 where weight > 0, contiguous."""
    b, q, h = hidden.shape
    slots = hidden.view(b, q // block_size, block_size, h)[:, :, 1:, :]
    keep = weights > 0
    return slots[keep].contiguous(), keep


def block_loss(hidden, batch, lm_head_w: torch.Tensor, final_flat: torch.Tensor | None, block_size: int,
               kind: str = "ce", temperature: float = 1.0) -> tuple[torch.Tensor, dict]:
    rows, keep = select(hidden, batch.weights, block_size)
    w = batch.weights[keep]
    labels = batch.labels[keep]
    logits = F.linear(rows, lm_head_w)
    if kind == "ce":
        per = F.cross_entropy(logits, labels, reduction="none")
    else:
        with torch.no_grad():
            t_logits = F.linear(final_flat[batch.teacher_rows[keep]], lm_head_w)
            t_logp = F.log_softmax(t_logits / temperature, dim=-1)
        s_logp = F.log_softmax(logits / temperature, dim=-1)
        # Forward KL(teacher || student), scaled by T^2 so gradients keep their size.
        per = (t_logp.exp() * (t_logp - s_logp)).sum(-1) * temperature**2
    loss = (per * w).sum() / w.sum().clamp_min(1e-8)
    with torch.no_grad():
        correct = (logits.argmax(-1) == labels).float()
        k = keep.nonzero()[:, 2]  # slot index 0..B-2 (predicts block position k+1)
        n_k = torch.bincount(k, minlength=block_size - 1).float()
        c_k = torch.bincount(k, weights=correct, minlength=block_size - 1)
    return loss, {"slots": int(keep.sum()), "correct_by_pos": c_k, "count_by_pos": n_k}
