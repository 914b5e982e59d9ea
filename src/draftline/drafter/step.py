"""One forward of the drafter over a micro-batch of sequences, loss included."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..config import DrafterParams, TrainParams
from . import blocks
from .batching import anchor_generator
from .loss import LossSpec, block_loss


def use_bf16(precision: str, device: torch.device = torch.device("cpu")) -> bool:
    if precision != "auto":
        return precision == "bfloat16"
    if device.type == "cuda":
        return True
    cpu = torch.cpu
    return bool(getattr(cpu, "_is_amx_tile_supported", lambda: False)()
                or getattr(cpu, "_is_avx512_bf16_supported", lambda: False)())


class Step:
    def __init__(self, drafter, embed_w, lm_head_w, dp: DrafterParams, tp: TrainParams, mask_id: int,
                 device: torch.device = torch.device("cpu")):
        self.drafter, self.dp, self.tp, self.mask_id, self.device = drafter, dp, tp, mask_id, device
        self.embed_w = embed_w.detach().to(device)
        self.lm_head_w = lm_head_w.detach().to(device)
        self.spec = LossSpec.of(tp)
        self.bf16 = use_bf16(tp.precision, device)

    def blocks(self, seqs, epoch: int, generator: torch.Generator | None = None) -> blocks.BlockBatch:
        """Anchors per sequence from (seed, epoch, id), or from `generator` (evaluation)."""
        anchors = [blocks.sample_anchors(s.loss_mask, self.tp.num_anchors,
                                         generator or anchor_generator(self.tp.seed, epoch, s.id)) for s in seqs]
        return blocks.build(seqs, anchors, self.dp.block_size, self.mask_id, self.tp.gamma)

    def loss(self, seqs, batch: blocks.BlockBatch, denom=None):
        # Weights and optimizer stay fp32; autocast runs the matmuls (above all the LM head) in bf16.
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            dev = self.device
            noise = F.embedding(batch.block_ids.to(dev), self.embed_w)
            hidden = self.drafter(position_ids=batch.position_ids.to(dev),
                                  attention_mask=batch.attention_mask.to(dev),
                                  noise_embedding=noise, target_hidden=batch.context.to(dev))
            final_flat = None
            if self.spec.needs_teacher:
                L = batch.context.shape[1]
                final_flat = torch.zeros(len(seqs) * L, seqs[0].final.shape[-1])
                for i, s in enumerate(seqs):
                    final_flat[i * L : i * L + s.final.shape[0]] = s.final
                final_flat = final_flat.to(dev)
            on_dev = blocks.BlockBatch(batch.context, batch.block_ids, batch.position_ids, batch.attention_mask,
                                       batch.labels.to(dev), batch.weights.to(dev), batch.teacher_rows.to(dev),
                                       batch.anchors_used)
            return block_loss(hidden.float(), on_dev, self.lm_head_w, final_flat, self.dp.block_size, self.spec,
                              denom, torch.bfloat16 if self.bf16 else torch.float32)
