"""Drafter losses over supervised slots only, fused with the target's LM head.

The frozen 49K-row LM head dominates a training step, and materialising the full
[slots, vocab] logits (plus their softmax, its backward and an fp32 copy) costs more than
the matmul itself. So we go chunk by chunk over contiguous rows: logits, loss, accuracy
and the gradient with respect to the drafter's hidden states, all in one pass; backward
then only scales the stored gradient. Only slots with weight > 0 reach the head.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 512  # rows per chunk: a [512, 49152] fp32 block is 100 MB


class _FusedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, weight, labels, w, teacher_rows, kind, temperature, compute_dtype):
        total_w = w.sum().clamp_min(1e-8)
        grad = torch.empty_like(rows)
        acc = torch.float64 if rows.dtype == torch.float64 else torch.float32  # softmax precision
        loss = rows.new_zeros((), dtype=acc)
        correct = torch.empty(rows.shape[0], dtype=torch.bool)
        wc = weight.to(compute_dtype)
        for s in range(0, rows.shape[0], CHUNK):
            e = min(s + CHUNK, rows.shape[0])
            logits = F.linear(rows[s:e].to(compute_dtype), wc).to(acc)
            y = labels[s:e]
            top, idx = logits.max(-1)
            correct[s:e] = idx == y
            scale = (w[s:e] / total_w)[:, None]
            if kind == "ce":
                # In place: exp(logits - max) becomes the softmax, then the CE gradient.
                picked = logits.gather(1, y[:, None])[:, 0]
                probs = logits.sub_(top[:, None]).exp_()
                norm = probs.sum(-1)
                lse = top + norm.log()
                loss += ((lse - picked) * w[s:e]).sum() / total_w
                g = probs.div_(norm[:, None])
                g[torch.arange(e - s), y] -= 1.0
                g.mul_(scale)
            else:
                t = temperature
                t_logits = F.linear(teacher_rows[s:e].to(compute_dtype), wc).to(acc)
                t_logp = torch.log_softmax(t_logits / t, -1)
                s_logp = torch.log_softmax(logits / t, -1)
                p = t_logp.exp()
                # Forward KL(teacher || student), times T^2 so gradients keep their size.
                loss += ((p * (t_logp - s_logp)).sum(-1) * t * t * w[s:e]).sum() / total_w
                g = (s_logp.exp() - p) * (t * scale)
            grad[s:e] = (g.to(compute_dtype) @ wc).to(rows.dtype)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None, None, None, None, None, None


def select(hidden: torch.Tensor, weights: torch.Tensor, block_size: int):
    """hidden [b, A*B, H] -> rows for slots 1..B-1 where weight > 0, contiguous."""
    b, q, h = hidden.shape
    slots = hidden.view(b, q // block_size, block_size, h)[:, :, 1:, :]
    keep = weights > 0
    return slots[keep].contiguous(), keep


def block_loss(hidden, batch, lm_head_w: torch.Tensor, final_flat: torch.Tensor | None, block_size: int,
               kind: str = "ce", temperature: float = 1.0,
               compute_dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, dict]:
    rows, keep = select(hidden, batch.weights, block_size)
    w = batch.weights[keep]
    labels = batch.labels[keep]
    teacher = final_flat[batch.teacher_rows[keep]].contiguous() if kind == "kl" else None
    loss, correct = _FusedHeadLoss.apply(rows, lm_head_w.detach(), labels, w, teacher, kind, temperature,
                                         compute_dtype)
    k = keep.nonzero()[:, 2]  # slot index 0..B-2 (predicts block position k+1)
    n_k = torch.bincount(k, minlength=block_size - 1).float()
    c_k = torch.bincount(k, weights=correct.float(), minlength=block_size - 1)
    return loss, {"slots": int(keep.sum()), "correct_by_pos": c_k, "count_by_pos": n_k}
