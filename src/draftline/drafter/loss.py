"""Drafter losses over supervised slots only, fused with the target's LM head.

The frozen 49K-row LM head dominates a training step, and materialising the full
[slots, vocab] logits (plus their softmax, its backward and an fp32 copy) costs more than
the matmul itself. So we go chunk by chunk over contiguous rows: logits, loss, accuracy
and the gradient with respect to the drafter's hidden states, all in one pass; backward
then only scales the stored gradient. Only slots with weight > 0 reach the head.

The loss is sum(w * loss) / denom. `denom` is the total weight of the whole optimizer step
(all micro-batches, all processes), so gradients summed over micro-batches and processes
equal those of one big batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .head_vocab import HeadVocab

CHUNK = 512  # rows per chunk: a [512, 49152] fp32 block is 100 MB


@dataclass(frozen=True)
class LossSpec:
    kind: str = "ce"  # ce | kl | mix
    kl_weight: float = 0.5  # mix only
    temperature: float = 1.0
    top_k: int | None = None

    @property
    def needs_teacher(self) -> bool:
        return self.kind in ("kl", "mix")

    @property
    def sparse_teacher(self) -> bool:
        """Top-k teacher: precomputed once per sequence instead of a head pass per step."""
        return self.needs_teacher and self.top_k is not None

    @classmethod
    def of(cls, tp) -> "LossSpec":
        return cls(tp.loss, tp.kl_weight, tp.kl_temperature, tp.kl_top_k)


@dataclass(frozen=True)
class SparseTeacher:
    """The teacher's k largest logits per row and their token ids."""

    ids: torch.Tensor  # [N, k] long
    vals: torch.Tensor  # [N, k] float

    def __getitem__(self, index) -> "SparseTeacher":
        return SparseTeacher(self.ids[index], self.vals[index])

    def to(self, device) -> "SparseTeacher":
        return SparseTeacher(self.ids.to(device), self.vals.to(device))


def top_k_teacher(final_rows: torch.Tensor, lm_head_w: torch.Tensor, k: int) -> SparseTeacher:
    """Top-k of lm_head(final) row by row, in chunks, in the head's dtype (cast it once
    outside: a 49K-row head per call is a copy as large as the product); the same logits
    the per-step path computes. top-k runs on those logits as they come out of the product,
    before widening: only the k kept values are converted."""
    acc = torch.float64 if final_rows.dtype == torch.float64 else torch.float32
    ids = torch.empty(final_rows.shape[0], k, dtype=torch.long, device=final_rows.device)
    vals = torch.empty(final_rows.shape[0], k, dtype=acc, device=final_rows.device)
    for s in range(0, final_rows.shape[0], CHUNK):
        top = F.linear(final_rows[s : s + CHUNK].to(lm_head_w.dtype), lm_head_w).topk(k, dim=-1)
        vals[s : s + CHUNK], ids[s : s + CHUNK] = top.values.to(acc), top.indices
    return SparseTeacher(ids, vals)


def _teacher_probs(t_logits: torch.Tensor, t: float, top_k: int | None):
    """Teacher distribution at temperature t (top-k renormalised): probs and log-probs,
    with log-prob 0 where the prob is 0 so that p * log p stays finite."""
    if top_k is None or top_k >= t_logits.shape[-1]:
        logp = torch.log_softmax(t_logits / t, -1)
        return logp.exp(), logp
    val, idx = t_logits.topk(top_k, dim=-1)
    lp = torch.log_softmax(val / t, -1)
    p = torch.zeros_like(t_logits).scatter_(-1, idx, lp.exp())
    logp = torch.zeros_like(t_logits).scatter_(-1, idx, lp)
    return p, logp


class _FusedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rows, weight, labels, w, teacher_rows, spec: LossSpec, denom, compute_dtype,
                need_grad: bool = True):
        """need_grad False (evaluation): the loss only, without the gradient's work."""
        grad = torch.empty_like(rows) if need_grad else None
        acc = torch.float64 if rows.dtype == torch.float64 else torch.float32  # softmax precision
        loss = rows.new_zeros((), dtype=acc)
        correct = torch.empty(rows.shape[0], dtype=torch.bool, device=rows.device)
        wc = weight.to(compute_dtype)
        a_kl = {"ce": 0.0, "kl": 1.0, "mix": spec.kl_weight}[spec.kind]
        for s in range(0, rows.shape[0], CHUNK):
            e = min(s + CHUNK, rows.shape[0])
            logits = F.linear(rows[s:e].to(compute_dtype), wc).to(acc)
            y = labels[s:e]
            scale = (w[s:e] / denom).to(acc)[:, None]
            top, idx = logits.max(-1)
            correct[s:e] = idx == y
            g = torch.zeros_like(logits) if need_grad else None
            if a_kl < 1.0:
                # softmax(z) - onehot(y): the CE gradient. y = -1 (a label outside a training
                # head vocabulary) drops out of the CE term.
                ok = y >= 0
                y_ok = y.clamp(min=0)
                picked = logits.gather(1, y_ok[:, None])[:, 0]
                probs = torch.exp(logits - top[:, None])
                norm = probs.sum(-1)
                lse = top + norm.log()
                loss += (1 - a_kl) * ((lse - picked) * scale[:, 0] * ok).sum()
                if need_grad:
                    probs.div_(norm[:, None])
                    probs[torch.arange(e - s, device=rows.device), y_ok] -= 1.0
                    g.add_(probs * ok[:, None], alpha=1 - a_kl)
            if a_kl > 0.0:
                t = spec.temperature
                s_logp = torch.log_softmax(logits / t, -1)
                # Forward KL(teacher || student), times T^2 so gradients keep their size.
                if isinstance(teacher_rows, SparseTeacher):
                    # Teacher ids outside a training head vocabulary come as -1: renormalised away;
                    # a row with none inside drops out of the KL term.
                    t_ids = teacher_rows.ids[s:e]
                    inside = t_ids >= 0
                    t_ids = t_ids.clamp(min=0)
                    vals = teacher_rows.vals[s:e].to(acc).masked_fill(~inside, float("-inf"))
                    row_ok = inside.any(-1, keepdim=True)
                    t_logp = torch.log_softmax(vals.masked_fill(~row_ok, 0.0) / t, -1)
                    p = t_logp.exp() * inside * row_ok
                    t_logp = t_logp.masked_fill(p == 0, 0.0)
                    kl = (p * (t_logp - s_logp.gather(1, t_ids))).sum(-1) * t * t
                    if need_grad:
                        g.add_(s_logp.exp_().mul_(row_ok).scatter_add_(1, t_ids, -p), alpha=a_kl * t)
                else:
                    t_logits = F.linear(teacher_rows[s:e].to(compute_dtype), wc).to(acc)
                    p, t_logp = _teacher_probs(t_logits, t, spec.top_k)
                    kl = (p * (t_logp - s_logp)).sum(-1) * t * t
                    if need_grad:
                        g.add_(s_logp.exp().sub_(p), alpha=a_kl * t)
                loss += a_kl * (kl * scale[:, 0]).sum()
            if need_grad:
                g.mul_(scale)
                grad[s:e] = (g.to(compute_dtype) @ wc).to(rows.dtype)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None, None, None, None, None, None, None


def select(hidden: torch.Tensor, weights: torch.Tensor, block_size: int):
    """hidden [b, A*B, H] -> rows for slots 1..B-1 where weight > 0, contiguous."""
    b, q, h = hidden.shape
    slots = hidden.view(b, q // block_size, block_size, h)[:, :, 1:, :]
    keep = weights > 0
    return slots[keep].contiguous(), keep


def block_loss(hidden, batch, lm_head_w: torch.Tensor, final_flat: "torch.Tensor | SparseTeacher | None",
               block_size: int,
               spec: LossSpec, denom: float | torch.Tensor | None = None,
               compute_dtype: torch.dtype = torch.float32,
               head: HeadVocab | None = None) -> tuple[torch.Tensor, dict]:
    """`final_flat`: the batch's final target states [b*L, H], or their precomputed top-k
    teacher (a SparseTeacher over the same b*L rows); None for ce. `head`: normalise over
    these tokens only, `lm_head_w` being already their rows (see head_vocab.py)."""
    rows, keep = select(hidden, batch.weights, block_size)
    w = batch.weights[keep]
    labels = batch.labels[keep]
    teacher = None
    if spec.needs_teacher:
        teacher = final_flat[batch.teacher_rows[keep]]
        teacher = teacher if isinstance(teacher, SparseTeacher) else teacher.contiguous()
    if head is not None:
        labels = head.index[labels]
        if isinstance(teacher, SparseTeacher):
            teacher = SparseTeacher(head.index[teacher.ids], teacher.vals)
    if denom is None:
        denom = w.sum()
    denom = torch.as_tensor(denom, dtype=w.dtype, device=w.device).clamp_min(1e-8)
    need_grad = torch.is_grad_enabled() and rows.requires_grad
    loss, correct = _FusedHeadLoss.apply(rows, lm_head_w.detach(), labels, w, teacher, spec, denom, compute_dtype,
                                         need_grad)
    k = keep.nonzero()[:, 2]  # slot index 0..B-2 (predicts block position k+1)
    n_k = torch.bincount(k, minlength=block_size - 1).float()
    c_k = torch.bincount(k, weights=correct.float(), minlength=block_size - 1)
    # Greedy acceptance with the true context: slots accepted before the first miss.
    hit = torch.zeros_like(keep)
    hit[keep] = correct
    accepted = hit.long().cumprod(-1).sum(-1)[keep[..., 0]]
    return loss, {"slots": int(keep.sum()), "weight": float(w.sum()), "correct_by_pos": c_k.cpu(),
                  "count_by_pos": n_k.cpu(), "blocks": int(accepted.numel()), "accepted": float(accepted.sum())}
