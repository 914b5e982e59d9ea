"""The training loop: length-bucketed batches, AdamW, warmup + cosine, per-step logs."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..config import DrafterParams, TrainParams
from ..progress import bar
from . import blocks
from .loss import block_loss


@dataclass
class TrainLog:
    steps: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)


def length_batches(seqs, batch_size: int, rng: random.Random) -> list[list[int]]:
    """Sort by length, cut into batches, shuffle the batch order: little padding, and
    every epoch still sees the data in a new order."""
    order = sorted(range(len(seqs)), key=lambda i: (seqs[i].input_ids.shape[0], seqs[i].id))
    out = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(out)
    return out


def lr_at(step: int, total: int, base: float, warmup_ratio: float) -> float:
    warm = max(1, int(round(total * warmup_ratio)))
    if step < warm:
        return base * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return base * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def use_bf16(precision: str) -> bool:
    if precision != "auto":
        return precision == "bfloat16"
    if torch.cuda.is_available():
        return True
    cpu = torch.cpu
    return bool(getattr(cpu, "_is_amx_tile_supported", lambda: False)()
                or getattr(cpu, "_is_avx512_bf16_supported", lambda: False)())


class Step:
    """One forward of the drafter over a list of sequences."""

    def __init__(self, drafter, embed_w, lm_head_w, dp: DrafterParams, tp: TrainParams, mask_id: int):
        self.drafter, self.embed_w, self.lm_head_w = drafter, embed_w, lm_head_w
        self.dp, self.tp, self.mask_id = dp, tp, mask_id
        self.bf16 = use_bf16(tp.precision)

    def __call__(self, seqs, gen: torch.Generator):
        # Weights and optimizer stay fp32; autocast runs the matmuls (above all the LM head) in bf16.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            return self._forward(seqs, gen)

    def _forward(self, seqs, gen: torch.Generator):
        anchors = [blocks.sample_anchors(s.loss_mask, self.tp.num_anchors, gen) for s in seqs]
        batch = blocks.build(seqs, anchors, self.dp.block_size, self.mask_id, self.tp.gamma)
        noise = F.embedding(batch.block_ids, self.embed_w)
        hidden = self.drafter(position_ids=batch.position_ids, attention_mask=batch.attention_mask,
                              noise_embedding=noise, target_hidden=batch.context)
        final_flat = None
        if self.tp.loss == "kl":
            L = batch.context.shape[1]
            final_flat = torch.zeros(len(seqs) * L, seqs[0].final.shape[-1])
            for i, s in enumerate(seqs):
                final_flat[i * L : i * L + s.final.shape[0]] = s.final
        return block_loss(hidden.float(), batch, self.lm_head_w, final_flat, self.dp.block_size,
                          self.tp.loss, self.tp.kl_temperature,
                          torch.bfloat16 if self.bf16 else torch.float32)


def evaluate(step_fn: Step, seqs, batch_size: int, seed: int) -> dict:
    step_fn.drafter.eval()
    gen = torch.Generator().manual_seed(seed)  # fixed anchors: evals are comparable over steps
    tot_loss, tot_w = 0.0, 0.0
    c = torch.zeros(step_fn.dp.block_size - 1)
    n = torch.zeros_like(c)
    with torch.no_grad():
        for i in range(0, len(seqs), batch_size):
            loss, st = step_fn(seqs[i : i + batch_size], gen)
            tot_loss += float(loss) * st["slots"]
            tot_w += st["slots"]
            c += st["correct_by_pos"]
            n += st["count_by_pos"]
    step_fn.drafter.train()
    acc = (c / n.clamp_min(1)).tolist()
    return {"loss": tot_loss / max(tot_w, 1), "acc_by_pos": acc}


def train(drafter, embed_w, lm_head_w, train_seqs, val_seqs, dp: DrafterParams, tp: TrainParams,
          mask_id: int) -> TrainLog:
    torch.manual_seed(tp.seed)
    rng = random.Random(tp.seed)
    gen = torch.Generator().manual_seed(tp.seed)
    step_fn = Step(drafter, embed_w, lm_head_w, dp, tp, mask_id)
    per_epoch = math.ceil(len(train_seqs) / tp.batch_size)
    total = per_epoch * tp.epochs if tp.max_steps is None else min(tp.max_steps, per_epoch * tp.epochs)
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=tp.lr, weight_decay=tp.weight_decay, betas=(0.9, 0.95))
    log = TrainLog()
    drafter.train()
    pb = bar(total, "train", unit="step")
    step, t0 = 0, time.perf_counter()
    for epoch in range(tp.epochs):
        for idx in length_batches(train_seqs, tp.batch_size, rng):
            if step >= total:
                break
            lr = lr_at(step, total, tp.lr, tp.warmup_ratio)
            for g in opt.param_groups:
                g["lr"] = lr
            seqs = [train_seqs[i] for i in idx]
            loss, st = step_fn(seqs, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(params, tp.grad_clip)
            opt.step()
            acc = (st["correct_by_pos"] / st["count_by_pos"].clamp_min(1)).tolist()
            step += 1
            row = {"step": step, "epoch": epoch, "loss": loss.item(), "lr": lr, "grad_norm": gnorm.item(),
                   "slots": st["slots"], "seconds": round(time.perf_counter() - t0, 2)}
            row.update({f"acc_{k + 1}": a for k, a in enumerate(acc)})
            log.steps.append(row)
            pb.update(1)
            pb.set_postfix(loss=f"{row['loss']:.3f}", acc1=f"{acc[0]:.2f}")
            if val_seqs and (step % tp.eval_every == 0 or step == total):
                ev = evaluate(step_fn, val_seqs, tp.batch_size, tp.seed)
                log.evals.append({"step": step, **ev})
        if step >= total:
            break
    pb.close()
    return log
