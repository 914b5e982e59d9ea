"""The training loop: global length-bucketed batches, micro-batches over processes and
accumulation, AdamW with warmup + cosine, held-out evals, checkpoints and exact resume."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..config import DrafterParams, TrainParams
from ..progress import bar
from . import checkpoint, dist
from .batching import Padding
from .data import InMemory, Prefetch, Schedule
from .evaluate import evaluate
from .head_vocab import HeadVocab
from .live import LiveLog
from .schedule import lr_at
from .step import Step


@dataclass
class TrainLog:
    steps: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    padding: dict = field(default_factory=lambda: {"real": 0, "padded": 0})
    resumed_from: int | None = None

    def as_dict(self) -> dict:
        return {"steps": self.steps, "evals": self.evals, "padding": self.padding}

    @property
    def padding_fraction(self) -> float:
        p = self.padding
        return 1 - p["real"] / p["padded"] if p["padded"] else 0.0


@dataclass
class Resume:
    folder: Path
    fingerprint: str
    every: int
    keep: int


def total_steps(n_seqs: int, tp: TrainParams) -> tuple[int, int]:
    per_epoch = math.ceil(n_seqs / tp.batch_size)
    total = per_epoch * tp.epochs
    return per_epoch, total if tp.max_steps is None else min(tp.max_steps, total)


def train(drafter, embed_w, lm_head_w, train_rows, val_rows, dp: DrafterParams, tp: TrainParams, mask_id: int,
          world: dist.World = dist.World(), resume: Resume | None = None, live: LiveLog | None = None) -> TrainLog:
    """train_rows, val_rows: data.py's InMemory or ShardRows (a plain list of Sequences is
    taken as in memory); live: where the main process logs each step as it ends (live.py)."""
    live = live or LiveLog(None)
    torch.manual_seed(tp.seed)
    train_rows = InMemory(train_rows) if isinstance(train_rows, list) else train_rows
    if tp.parallel == "fsdp" and world.size > 1:
        _every_rank_has_work(len(train_rows), tp, world)
    drafter.to(world.device)
    sharded = tp.parallel == "fsdp" and dist.shard(drafter, world)
    head = HeadVocab.frequent(train_rows.token_ids(), tp.head_vocab, lm_head_w.shape[0]) if tp.head_vocab else None
    step_fn = Step(drafter, embed_w, lm_head_w, dp, tp, mask_id, world.device, head)
    per_epoch, total = total_steps(len(train_rows), tp)
    params = [p for p in drafter.parameters() if p.requires_grad]
    # Fused on GPUs (one kernel for all parameters); the CPU keeps the reference update.
    opt = torch.optim.AdamW(params, lr=tp.lr, weight_decay=tp.weight_decay, betas=(0.9, 0.95),
                            fused=world.device.type == "cuda")
    log = TrainLog()
    start = 0
    if resume is not None:
        state = checkpoint.latest(resume.folder, resume.fingerprint) if world.main else None
        if dist.broadcast_flag(world, state is not None):
            if state is None:  # other ranks read the file rank 0 chose
                state = checkpoint.latest(resume.folder, resume.fingerprint)
            checkpoint.restore(state, drafter, opt, sharded)
            start = state["step"]
            log.steps, log.evals, log.padding = state["log"]["steps"], state["log"]["evals"], state["log"]["padding"]
            log.resumed_from = start
    live.replay(log.steps, log.evals)
    lengths = train_rows.lengths
    schedule = Schedule(lengths, train_rows.ids, tp.batch_size, tp.seed, per_epoch, world.rank, world.size,
                        tp.grad_accum)
    fetch = Prefetch(train_rows, schedule, start, total, tp.prefetch if tp.loader == "stream" else 0)
    with fetch:
        drafter.train()
        pb = bar(total, "train", unit="step") if world.main else None
        if pb is not None and start:
            pb.update(start)
        t0 = time.perf_counter()
        step = start
        while step < total:
            epoch = step // per_epoch
            micro, seqs = fetch.get(step)
            built = [step_fn.blocks(s, epoch, training=True) for s in seqs]
            local_w = sum(float(b.weights.sum()) for b in built)
            pad = Padding()
            for m in micro:
                pad.add([lengths[i] for i in m])
            denom, real, padded = dist.all_sum(world, [local_w, pad.real, pad.padded])
            lr = lr_at(step, total, tp.lr, tp.warmup_ratio, tp.min_lr_ratio)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=False)
            loss_sum, slots = 0.0, 0
            c = torch.zeros(dp.block_size - 1)
            n = torch.zeros_like(c)
            for s, b in zip(seqs, built):
                loss, st = step_fn.loss(s, b, denom, training_head=True)
                (loss * world.size if sharded else loss).backward()  # FSDP averages; the sum is wanted
                loss_sum += loss.item()
                slots += st["slots"]
                c += st["correct_by_pos"]
                n += st["count_by_pos"]
            if not sharded:  # FSDP has reduce-scattered them in backward
                dist.all_sum_grads(world, params)
            gnorm = torch.nn.utils.clip_grad_norm_(params, tp.grad_clip)
            gnorm = gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm
            # Checked before the update: a non-finite loss or gradient would make every weight
            # NaN, and the stage would still write a drafter and report success. The gradient
            # norm is the same on every process (gradients are summed first), so all stop.
            if not (math.isfinite(loss_sum) and math.isfinite(float(gnorm))):
                raise RuntimeError(
                    f"train: step {step + 1} (epoch {epoch}): loss {loss_sum} and gradient norm {float(gnorm)}; "
                    f"training diverged (lower train.lr, check the hidden states); checkpoints up to step "
                    f"{step} are kept")
            opt.step()
            loss_sum, slots, *cn = dist.all_sum(world, [loss_sum, slots] + c.tolist() + n.tolist())
            c, n = torch.tensor(cn[: dp.block_size - 1]), torch.tensor(cn[dp.block_size - 1 :])
            step += 1
            log.padding["real"] += int(real)
            log.padding["padded"] += int(padded)
            acc = (c / n.clamp_min(1)).tolist()
            row = {"step": step, "epoch": epoch, "loss": loss_sum, "lr": lr, "grad_norm": float(gnorm),
                   "slots": int(slots), "tokens": int(real), "padding": round(1 - real / max(padded, 1), 4),
                   "seconds": round(time.perf_counter() - t0, 2)}
            row.update({f"acc_{k + 1}": a for k, a in enumerate(acc)})
            log.steps.append(row)
            live.step(row)
            if pb is not None:
                pb.update(1)
                pb.set_postfix(loss=f"{loss_sum:.3f}", acc1=f"{acc[0]:.2f}")
            # Sharded, every process takes part in each forward; the main one logs.
            if len(val_rows) and (world.main or sharded) and (step % tp.eval_every == 0 or step == total):
                ev = evaluate(step_fn, val_rows, max(1, tp.batch_size // tp.grad_accum), tp.seed)
                log.evals.append({"step": step, **ev})
                live.eval(step, ev)  # a no-op off the main process
                if pb is not None:
                    pb.set_postfix(loss=f"{loss_sum:.3f}", val=f"{ev['loss']:.3f}", tau_est=f"{ev['tau_estimate']:.2f}")
            if resume is not None and (step % resume.every == 0 or step == total):
                model_sd, opt_sd = dist.full_state(drafter, opt) if sharded else (drafter.state_dict(),
                                                                                   opt.state_dict())
                if world.main:
                    checkpoint.save(resume.folder, step, resume.fingerprint, model_sd, opt_sd, log.as_dict(),
                                    resume.keep)
                dist.barrier(world)
        if pb is not None:
            pb.close()
    return log


def _every_rank_has_work(n_rows: int, tp: TrainParams, world: dist.World) -> None:
    """FSDP's collectives run inside every forward and backward, so every process needs the
    same number of micro-batches in every step; an epoch's last, smaller batch must still
    give each one a micro-batch."""
    last = n_rows % tp.batch_size or tp.batch_size
    if last < world.size * tp.grad_accum:
        raise ValueError(f"train.parallel: fsdp: the last batch of each epoch holds {last} of {n_rows} training rows, "
                         f"fewer than processes ({world.size}) x train.grad_accum ({tp.grad_accum}); change "
                         "train.batch_size or use parallel: ddp")
