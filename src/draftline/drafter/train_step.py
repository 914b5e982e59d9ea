"""One forward of the drafter over a micro-batch of sequences, loss included."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ..hidden.state_dtype import widen
from ..precision import bf16_units
from . import blocks
from .batching import anchor_generator
from .block_attention import routed
from .dflash2 import block_local_convs, is_dflash2, selector_loss, selector_targets
from .head_vocab import HeadVocab
from .loss import LossSpec, SparseTeacher, block_loss, select, top_k_teacher

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.drafter import DrafterParams
    from ..config.train import TrainParams


TEACHER_CACHE_BYTES = 1 << 30  # the embedded default's teachers take about 50 MB
# Held-out CE: comparable across teachers (a KL loss is not, when the teacher changes: FP8
# storage, top-k), so evaluation reports it beside the configured loss.
CE = LossSpec()


def final_states(seq, device: torch.device) -> torch.Tensor:
    """A sequence's final (teacher) states in float32 on `device`, moved as stored."""
    scale = None if seq.final_scale is None else seq.final_scale.to(device)
    return widen(seq.final.to(device), scale)


def use_bf16(precision: str, device: torch.device = torch.device("cpu")) -> bool:
    if precision != "auto":
        return precision == "bfloat16"
    return bf16_units(device)


class Step:
    def __init__(self, drafter, embed_w, lm_head_w, dp: DrafterParams, tp: TrainParams, mask_id: int,
                 device: torch.device = torch.device("cpu"), head: HeadVocab | None = None):
        self.drafter, self.dp, self.tp, self.mask_id, self.device = drafter, dp, tp, mask_id, device
        self.embed_w = embed_w.detach().to(device)
        self.lm_head_w = lm_head_w.detach().to(device)
        # Training's head vocabulary (head_vocab.py); evaluation always uses the full head.
        self.head = head.to(device) if head is not None else None
        self.head_w = self.lm_head_w[self.head.ids].contiguous() if head is not None else None
        self.spec = LossSpec.of(tp)
        self.bf16 = use_bf16(tp.precision, device)
        self.compute_dtype = torch.bfloat16 if self.bf16 else torch.float32
        # The full head in the compute dtype, cast once (top-k teachers read it per sequence).
        self.lm_head_c = self.lm_head_w.to(self.compute_dtype)
        self.block_attention = tp.attention == "blocks" or (tp.attention == "auto" and device.type == "cpu")
        self._teachers: dict[str, SparseTeacher] = {}  # sequence id -> its top-k teacher
        self._teacher_bytes = 0

    def teacher(self, seq) -> SparseTeacher:
        """Top-k teacher rows of a sequence. Those computed from a stored final state are
        kept (up to TEACHER_CACHE_BYTES): a top-k KL step then costs what a CE step costs,
        with no head pass per step. Past the budget (a split of millions of rows) they are
        computed per step, and a large run stores the top-k at extraction instead."""
        if seq.id in self._teachers:
            return self._teachers[seq.id]
        k = self.spec.top_k
        if seq.topk_ids is not None:  # stored by extract (extract.teacher: top_k), best first
            return SparseTeacher(seq.topk_ids[:, :k].to(self.device), seq.topk_logprobs[:, :k].to(self.device).float())
        with torch.no_grad():
            t = top_k_teacher(final_states(seq, self.device), self.lm_head_c, k)
        size = t.ids.numel() * t.ids.element_size() + t.vals.numel() * t.vals.element_size()
        if self._teacher_bytes + size <= TEACHER_CACHE_BYTES:
            self._teachers[seq.id] = t
            self._teacher_bytes += size
        return t

    def _flat_teacher(self, seqs, L: int):
        if self.spec.sparse_teacher:
            k = self.spec.top_k
            ids = torch.zeros(len(seqs) * L, k, dtype=torch.long, device=self.device)
            vals = torch.zeros(len(seqs) * L, k, device=self.device)
            for i, s in enumerate(seqs):
                t = self.teacher(s)
                ids[i * L : i * L + t.ids.shape[0]] = t.ids
                vals[i * L : i * L + t.ids.shape[0]] = t.vals
            return SparseTeacher(ids, vals)
        flat = torch.zeros(len(seqs) * L, seqs[0].final.shape[-1], device=self.device)
        for i, s in enumerate(seqs):
            flat[i * L : i * L + s.final.shape[0]] = final_states(s, self.device)
        return flat

    def blocks(self, seqs, epoch: int, generator: torch.Generator | None = None,
               training: bool = False) -> blocks.BlockBatch:
        """Anchors per sequence from (seed, epoch, id), or from `generator` (evaluation).
        training: add `train.prompt_anchors` (evaluation scores answer anchors only)."""
        extra = self.tp.prompt_anchors if training else 0
        anchors = [blocks.sample_anchors(s.loss_mask, self.tp.num_anchors,
                                         generator or anchor_generator(self.tp.seed, epoch, s.id), extra)
                   for s in seqs]
        return blocks.build(seqs, anchors, self.dp.block_size, self.mask_id, self.tp.gamma, extra > 0)

    def loss(self, seqs, batch: blocks.BlockBatch, denom=None, training_head: bool = False):
        """training_head: a training step: normalise over the training head vocabulary, if
        one is set, and add a DFlash2 selector's loss (evaluation scores the drafter's own
        argmax, comparable across architectures)."""
        restricted = training_head and self.head is not None
        # Weights and optimizer stay fp32; autocast runs the matmuls (above all the LM head) in bf16.
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            dev = self.device
            noise = F.embedding(batch.block_ids.to(dev), self.embed_w)
            inputs = dict(position_ids=batch.position_ids.to(dev), noise_embedding=noise,
                          target_hidden=batch.features(dev))  # as stored over the bus, fp32 here
            with block_local_convs(self.dp.block_size):
                with routed():  # each layer's mask from the layout: full and sliding layers differ
                    hidden = self.drafter(**inputs, block_layout=batch.layout(dense=not self.block_attention).to(dev))
            final_flat = self._flat_teacher(seqs, batch.context.shape[1]) if self.spec.needs_teacher else None
            on_dev = blocks.BlockBatch(batch.context, batch.block_ids, batch.position_ids, batch.ctx_visible,
                                       batch.labels.to(dev), batch.weights.to(dev), batch.teacher_rows.to(dev),
                                       batch.anchors_used, batch.context_scale)
            if restricted:
                head_w = self.head_w
            else:  # evaluation: the full head, already in the compute dtype
                head_w = self.lm_head_c
            loss, stats = block_loss(hidden.float(), on_dev, head_w, final_flat,
                                     self.dp.block_size, self.spec, denom, self.compute_dtype,
                                     self.head if restricted else None)
            if not training_head:  # evaluation: also the CE on the target's tokens, whatever the loss
                stats["ce"] = float(loss) if self.spec.kind == "ce" else float(
                    block_loss(hidden.float(), on_dev, head_w, None, self.dp.block_size, CE, denom,
                               self.compute_dtype)[0])
        if training_head and is_dflash2(self.drafter) and self.tp.selector_weight > 0:
            loss = loss + self.tp.selector_weight * self._selector_loss(hidden, batch, on_dev, final_flat, head_w,
                                                                        restricted, denom)
        return loss, stats

    def _selector_loss(self, hidden, batch, on_dev, final_flat, head_w, restricted: bool, denom):
        B = self.dp.block_size
        rows, keep = select(hidden.float(), on_dev.weights, B)
        predecessors = selector_targets(batch.block_ids.to(self.device), on_dev.labels, keep, B)
        # The token the selector should pick: the target's own choice there (its top-1 where
        # a top-k teacher is at hand, which on prompt anchors can differ from the text).
        if isinstance(final_flat, SparseTeacher):
            targets = final_flat.ids[on_dev.teacher_rows[keep], 0]
        else:
            targets = on_dev.labels[keep]
        w = on_dev.weights[keep]
        d = w.sum() if denom is None else torch.as_tensor(denom, dtype=w.dtype, device=w.device)
        head = self.head if restricted else None
        with torch.autocast(self.device.type, enabled=False):
            return selector_loss(self.drafter.candidate_selector, rows, predecessors, targets, head_w,
                                 head.ids if head else None, head.index if head else None, w,
                                 d.clamp_min(1e-8), self.dp.dflash2.selector_top_k, self.compute_dtype)
