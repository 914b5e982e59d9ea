"""Training blocks: anchors, the sparse block mask, labels and position-decay weights.

For an anchor `a` the block is [token[a], MASK * (B-1)] at positions a..a+B-1. It sees the
context features of positions < a (strictly: at inference the anchor's own features are
not known yet) and every slot of its own block, nothing of other blocks. Slot k predicts
token[a+k], weighted by the loss mask there and by exp(-(k-1)/gamma).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..hidden.state_dtype import widen
from .block_attention import BlockLayout


@dataclass
class BlockBatch:
    context: torch.Tensor  # [b, L, nL*H] target features, as stored (bf16, FP8, or widened)
    block_ids: torch.Tensor  # [b, A*B] token ids fed to the drafter
    position_ids: torch.Tensor  # [b, L + A*B]
    ctx_visible: torch.Tensor  # [b, A, L] bool: block a sees context position l (l < anchor)
    labels: torch.Tensor  # [b, A, B-1]
    weights: torch.Tensor  # [b, A, B-1] 0 where nothing is supervised
    teacher_rows: torch.Tensor  # [b, A, B-1] index into the flattened [b*L] final states
    anchors_used: int
    context_scale: torch.Tensor | None = None  # [b, L, nL] float32: FP8 features' scales

    def features(self, device: torch.device) -> torch.Tensor:
        """The context features in float32 on `device`: moved as stored (half the bytes of
        bf16 for FP8), then widened there."""
        scale = None if self.context_scale is None else self.context_scale.to(device)
        return widen(self.context.to(device), scale)

    @property
    def block_size(self) -> int:
        return self.block_ids.shape[1] // self.ctx_visible.shape[1]

    def layout(self, dense: bool = False) -> BlockLayout:
        """The batch's attention layout; dense: for sdpa over a dense mask, built per layer
        (a sliding layer's differs from a full one's)."""
        b, L = self.context.shape[:2]
        anchors = self.position_ids[:, L:].reshape(b, -1, self.block_size)[:, :, 0]
        return BlockLayout(self.ctx_visible.shape[2], self.block_size, self.ctx_visible, anchors, dense)

    @property
    def attention_mask(self) -> torch.Tensor:
        """[b, 1, A*B, L + A*B] bool, True = may attend, of a full-attention layer: the context
        before the anchor and the block's own B slots (what block_attention computes without
        the dense mask)."""
        return self.layout().mask(None, False)


def anchor_candidates(loss_mask: torch.Tensor) -> torch.Tensor:
    """Positions a with a and a+1 both supervised."""
    m = loss_mask > 0
    return torch.nonzero(m[:-1] & m[1:]).flatten()


def _draw(cand: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    if cand.numel() > n:
        cand = cand[torch.randperm(cand.numel(), generator=gen)[:n]]
    return cand


def sample_anchors(loss_mask: torch.Tensor, num_anchors: int, gen: torch.Generator,
                   prompt_anchors: int = 0) -> torch.Tensor:
    """`num_anchors` answer anchors, then (drawn after them from the same generator, so
    the answer anchors do not depend on it) up to `prompt_anchors` anchors at positions
    >= 1 outside the loss mask: prompts, template tokens, earlier user turns."""
    cand = _draw(anchor_candidates(loss_mask), num_anchors, gen)
    if prompt_anchors:
        m = loss_mask > 0
        outside = torch.nonzero(~m[1:-1]).flatten() + 1  # a >= 1 has context; a + 1 exists
        cand = torch.cat([cand, _draw(outside, prompt_anchors, gen)])
    return cand.sort().values


def decay(block_size: int, gamma: float | None) -> torch.Tensor:
    k = torch.arange(1, block_size, dtype=torch.float32)
    return torch.ones_like(k) if gamma is None else torch.exp(-(k - 1) / gamma)


def build(seqs, anchors: list[torch.Tensor], block_size: int, mask_id: int, gamma: float | None,
          every_position: bool = False) -> BlockBatch:
    """every_position: supervise every slot inside the sequence, not only the loss mask
    (training with prompt anchors, whose targets are the target's own distributions)."""
    b = len(seqs)
    B = block_size
    L = max(s.input_ids.shape[0] for s in seqs)
    A = max(1, max(a.numel() for a in anchors))
    Q = A * B
    feat = seqs[0].context.shape[-1]
    context = torch.zeros(b, L, feat, dtype=seqs[0].context.dtype)
    scaled = seqs[0].context_scale is not None
    scale = torch.zeros(b, L, seqs[0].context_scale.shape[-1]) if scaled else None
    block_ids = torch.full((b, A, B), mask_id, dtype=torch.long)
    block_pos = torch.zeros(b, A, B, dtype=torch.long)
    labels = torch.zeros(b, A, B - 1, dtype=torch.long)
    weights = torch.zeros(b, A, B - 1)
    teacher_rows = torch.zeros(b, A, B - 1, dtype=torch.long)
    ctx_visible = torch.zeros(b, A, L, dtype=torch.bool)
    w_k = decay(B, gamma)
    offs = torch.arange(B)
    used = 0
    for i, (s, a) in enumerate(zip(seqs, anchors)):
        n = s.input_ids.shape[0]
        context[i, :n] = s.context
        if scaled:
            scale[i, :n] = s.context_scale
        na = a.numel()
        used += na
        if na == 0:
            continue
        pos = a[:, None] + offs[None, :]  # [na, B]
        block_pos[i, :na] = pos
        block_ids[i, :na, 0] = s.input_ids[a]
        tgt = pos[:, 1:]
        inside = tgt < n
        safe = tgt.clamp(max=n - 1)
        labels[i, :na] = torch.where(inside, s.input_ids[safe], 0)
        sup = torch.ones_like(s.loss_mask) if every_position else s.loss_mask
        weights[i, :na] = torch.where(inside, sup[safe], 0.0) * w_k
        # The target's distribution for token[a+k] comes from its state at a+k-1.
        teacher_rows[i, :na] = i * L + (tgt - 1).clamp(max=n - 1)
        ctx_visible[i, :na] = torch.arange(L)[None, :] < a[:, None]
    position_ids = torch.cat([torch.arange(L).expand(b, L), block_pos.view(b, Q)], dim=1)
    return BlockBatch(context, block_ids.view(b, Q), position_ids, ctx_visible, labels, weights, teacher_rows, used,
                      scale)
