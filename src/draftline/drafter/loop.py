"""The training loop: global length-bucketed batches, micro-batches over processes and
accumulation, AdamW with warmup + cosine, held-out evals, checkpoints and exact resume."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .. import distributed as dist
from ..progress import bar
from . import checkpoint, fsdp
from .batching import Padding
from .data import BatchOrder, InMemory, Prefetch
from .evaluate import evaluate
from .head_vocab import HeadVocab
from .live import LiveLog
from .lr_schedule import lr_at
from .train_step import Step

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.drafter import DrafterParams
    from ..config.train import TrainParams


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
    sharded = tp.parallel == "fsdp" and fsdp.shard(drafter, world)
    head = HeadVocab.frequent(train_rows.token_ids(), tp.head_vocab, lm_head_w.shape[0]) if tp.head_vocab else None
    step_fn = Step(drafter, embed_w, lm_head_w, dp, tp, mask_id, world.device, head)
    per_epoch, total = total_steps(len(train_rows), tp)
    params = [p for p in drafter.parameters() if p.requires_grad]
    run = TrainingRun(drafter, step_fn, params, _adamw(params, tp, world), val_rows, dp, tp, world, sharded,
                      per_epoch, total, resume, live)
    start = run.restore()
    live.replay(run.log.steps, run.log.evals)
    lengths = train_rows.lengths
    order = BatchOrder(lengths, train_rows.ids, tp.batch_size, tp.seed, per_epoch, world.rank, world.size,
                       tp.grad_accum)
    with Prefetch(train_rows, order, start, total, tp.prefetch if tp.loader == "stream" else 0) as fetch:
        drafter.train()
        pb = bar(total, "train", unit="step") if world.main else None
        if pb is not None and start:
            pb.update(start)
        t0 = time.perf_counter()
        for step in range(start, total):
            epoch = step // per_epoch
            micro, seqs = fetch.get(step)
            stats = run.optimizer_step(step, epoch, [[lengths[i] for i in m] for m in micro], seqs)
            run.record(step + 1, epoch, stats, time.perf_counter() - t0, pb)
            run.evaluate_if_due(step + 1, stats, pb)
            run.checkpoint_if_due(step + 1)
        if pb is not None:
            pb.close()
    return run.log


def _adamw(params: list[torch.nn.Parameter], tp: TrainParams, world: dist.World) -> torch.optim.AdamW:
    # Fused on GPUs (one kernel for all parameters); the CPU keeps the reference update.
    return torch.optim.AdamW(params, lr=tp.lr, weight_decay=tp.weight_decay, betas=(0.9, 0.95),
                             fused=world.device.type == "cuda")


@dataclass
class StepStats:
    """One optimizer step's numbers; all but lr are summed over the processes."""

    lr: float
    loss: float
    grad_norm: float
    slots: float
    real: float  # tokens in the step's micro-batches
    padded: float  # their padded size
    acc: list[float]  # acceptance by drafted position (1..block_size-1)


@dataclass
class TrainingRun:
    """What every optimizer step of one run reads (built once by `train`) and the log it
    writes; each method is one piece of a step, in the order `train` calls them."""

    drafter: torch.nn.Module
    step_fn: Step
    params: list[torch.nn.Parameter]  # the trainable ones
    opt: torch.optim.AdamW
    val_rows: object
    dp: DrafterParams
    tp: TrainParams
    world: dist.World
    sharded: bool  # FSDP: each process holds a shard of the weights
    per_epoch: int
    total: int
    resume: Resume | None
    live: LiveLog
    log: TrainLog = field(default_factory=TrainLog)

    def restore(self) -> int:
        """The step to start from: the latest checkpoint's (weights, optimizer and log
        restored from it), else 0."""
        if self.resume is None:
            return 0
        world, resume = self.world, self.resume
        state = checkpoint.latest(resume.folder, resume.fingerprint) if world.main else None
        if not dist.broadcast_flag(world, state is not None):
            return 0
        if state is None:  # other ranks read the file rank 0 chose
            state = checkpoint.latest(resume.folder, resume.fingerprint)
        checkpoint.restore(state, self.drafter, self.opt, self.sharded)
        log = self.log
        log.steps, log.evals, log.padding = state["log"]["steps"], state["log"]["evals"], state["log"]["padding"]
        log.resumed_from = state["step"]
        return state["step"]

    def optimizer_step(self, step: int, epoch: int, micro_lengths: list[list[int]], seqs) -> StepStats:
        """Forward and backward over this process's micro-batches, gradients summed over the
        processes, clipped, checked, and one AdamW update at the scheduled lr."""
        dp, tp, world, step_fn = self.dp, self.tp, self.world, self.step_fn
        built = [step_fn.blocks(s, epoch, training=True) for s in seqs]
        local_w = sum(float(b.weights.sum()) for b in built)
        pad = Padding()
        for lengths in micro_lengths:
            pad.add(lengths)
        denom, real, padded = dist.all_sum(world, [local_w, pad.real, pad.padded])
        lr = lr_at(step, self.total, tp.lr, tp.warmup_ratio, tp.min_lr_ratio)
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=False)
        loss_sum, slots = 0.0, 0
        c = torch.zeros(dp.block_size - 1)
        n = torch.zeros_like(c)
        for s, b in zip(seqs, built):
            loss, st = step_fn.loss(s, b, denom, training_head=True)
            (loss * world.size if self.sharded else loss).backward()  # FSDP averages; the sum is wanted
            loss_sum += loss.item()
            slots += st["slots"]
            c += st["correct_by_pos"]
            n += st["count_by_pos"]
        if not self.sharded:  # FSDP has reduce-scattered them in backward
            dist.all_sum_grads(world, self.params)
        gnorm = torch.nn.utils.clip_grad_norm_(self.params, tp.grad_clip)
        gnorm = gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm
        _stop_if_diverged(step, epoch, loss_sum, float(gnorm))
        self.opt.step()
        loss_sum, slots, *cn = dist.all_sum(world, [loss_sum, slots] + c.tolist() + n.tolist())
        c, n = torch.tensor(cn[: dp.block_size - 1]), torch.tensor(cn[dp.block_size - 1 :])
        return StepStats(lr, loss_sum, float(gnorm), slots, real, padded, (c / n.clamp_min(1)).tolist())

    def record(self, step: int, epoch: int, stats: StepStats, seconds: float, pb) -> None:
        """Log the step that just ended (`step` counts from 1) and show it."""
        log = self.log
        log.padding["real"] += int(stats.real)
        log.padding["padded"] += int(stats.padded)
        row = {"step": step, "epoch": epoch, "loss": stats.loss, "lr": stats.lr, "grad_norm": stats.grad_norm,
               "slots": int(stats.slots), "tokens": int(stats.real),
               "padding": round(1 - stats.real / max(stats.padded, 1), 4), "seconds": round(seconds, 2)}
        row.update({f"acc_{k + 1}": a for k, a in enumerate(stats.acc)})
        log.steps.append(row)
        self.live.step(row)
        if pb is not None:
            pb.update(1)
            pb.set_postfix(loss=f"{stats.loss:.3f}", acc1=f"{stats.acc[0]:.2f}")

    def evaluate_if_due(self, step: int, stats: StepStats, pb) -> None:
        """The held-out eval every train.eval_every steps and after the last."""
        tp = self.tp
        due = step % tp.eval_every == 0 or step == self.total
        # Sharded, every process takes part in each forward; the main one logs.
        if len(self.val_rows) and (self.world.main or self.sharded) and due:
            ev = evaluate(self.step_fn, self.val_rows, max(1, tp.batch_size // tp.grad_accum), tp.seed)
            self.log.evals.append({"step": step, **ev})
            self.live.eval(step, ev)  # a no-op off the main process
            if pb is not None:
                pb.set_postfix(loss=f"{stats.loss:.3f}", val=f"{ev['loss']:.3f}", tau_est=f"{ev['tau_estimate']:.2f}")

    def checkpoint_if_due(self, step: int) -> None:
        """A checkpoint every resume.every steps and after the last; the main process writes it."""
        resume = self.resume
        if resume is None or not (step % resume.every == 0 or step == self.total):
            return
        if self.sharded:
            model_sd, opt_sd = fsdp.full_state(self.drafter, self.opt)
        else:
            model_sd, opt_sd = self.drafter.state_dict(), self.opt.state_dict()
        if self.world.main:
            checkpoint.save(resume.folder, step, resume.fingerprint, model_sd, opt_sd, self.log.as_dict(), resume.keep)
        dist.barrier(self.world)


def _stop_if_diverged(step: int, epoch: int, loss: float, grad_norm: float) -> None:
    """Checked before the update: a non-finite loss or gradient would make every weight
    NaN, and the stage would still write a drafter and report success. The gradient norm
    is the same on every process (gradients are summed first), so all stop."""
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        raise RuntimeError(
            f"train: step {step + 1} (epoch {epoch}): loss {loss} and gradient norm {grad_norm}; "
            f"training diverged (lower train.lr, check the hidden states); checkpoints up to step "
            f"{step} are kept")


def _every_rank_has_work(n_rows: int, tp: TrainParams, world: dist.World) -> None:
    """FSDP's collectives run inside every forward and backward, so every process needs the
    same number of micro-batches in every step; an epoch's last, smaller batch must still
    give each one a micro-batch."""
    last = n_rows % tp.batch_size or tp.batch_size
    if last < world.size * tp.grad_accum:
        raise ValueError(f"train.parallel: fsdp: the last batch of each epoch holds {last} of {n_rows} training rows, "
                         f"fewer than processes ({world.size}) x train.grad_accum ({tp.grad_accum}); change "
                         "train.batch_size or use parallel: ddp")
