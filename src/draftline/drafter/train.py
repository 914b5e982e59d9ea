"""Stage `train`: train the DFlash drafter on the target's hidden states, stored by extract
(train.features: offline) or computed by the target during training (online, online.py).

    draftline train                                          # one process
    torchrun --nproc_per_node N -m draftline train           # data parallel (NCCL on GPUs, gloo on CPUs)

Writes the drafter's config.json and model.safetensors, metrics and the training curves;
keeps resume state in the --state folder (a killed run continues from its last checkpoint
when rerun with the same params, data and code).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from .. import distributed as dist
from ..devices import compute_device
from ..hidden.store import file_digest, read_index
from ..io import temp_beside, write_json, write_tsv
from ..target.info import TargetInfo
from ..target.load import load_config, load_tokenizer
from ..target.weights import load_io_weights
from . import fsdp
from .checkpoint import fingerprint
from .data import open_rows
from .init_target import init_from_target
from .live import LiveLog
from .loop import Resume, train
from .model import (
    DRAFTER_FILES,
    build_drafter,
    drafter_config,
    mask_token_id,
    save_drafter,
)
from .online import online_rows
from .train_step import use_bf16


def run(params, model: Path, info_file: Path, hidden: Path, tokens: Path, out: Path, state: Path, metrics: Path,
        plots: dict[str, Path], device=None, device_map: str | None = None) -> None:
    world = dist.init(device or compute_device(local_rank=dist.local_rank()))
    try:
        _train(params, params.drafter, params.train, world, Inputs(model, info_file, hidden, tokens, device_map),
               out, state, metrics, plots)
    finally:
        dist.close(world)


@dataclass(frozen=True)
class Inputs:
    model: Path
    info: Path
    hidden: Path  # the stored features (train.features: offline)
    tokens: Path  # the tokenized rows (train.features: online)
    device_map: str | None = None  # the target's, online


def _rows(params, tp, world, info, inputs: Inputs):
    """(train rows, held-out rows, what the resume fingerprint records of the data)."""
    if tp.features == "online":
        train_rows, val_rows = online_rows(params, inputs.model, info, inputs.tokens, world, inputs.device_map)
        return train_rows, val_rows, {"features": "online", "tokens": file_digest(inputs.tokens),
                                      "info": file_digest(inputs.info), "dtype": params.extract.dtype}
    hidden, index = inputs.hidden, read_index(inputs.hidden)
    if index["target_layer_ids"] != info.target_layer_ids:
        raise ValueError(f"{hidden}: extracted layers {index['target_layer_ids']} differ from "
                         f"{info.target_layer_ids} in {inputs.info}; rerun extract")
    stored = index.get("teacher", "final")
    if tp.loss != "ce" and (stored == "none" or stored == "top_k" and (tp.kl_top_k or 1 << 62) > index["top_k"]):
        have = "no teacher" if stored == "none" else f"the teacher's top {index['top_k']}"
        raise ValueError(f"train.loss: {tp.loss} with train.kl_top_k: {tp.kl_top_k}, but {hidden} holds {have} "
                         "(extract.teacher, extract.top_k); rerun extract or train with loss: ce")
    return open_rows(hidden, "train", tp.loader), open_rows(hidden, "val", tp.loader), index


def _train(params, dp, tp, world, inputs: Inputs, out, state, metrics, plots) -> None:
    model_dir = inputs.model
    info = TargetInfo.load(inputs.info)
    if tp.batch_size % (world.size * tp.grad_accum):
        raise ValueError(f"train.batch_size ({tp.batch_size}) must be a multiple of processes ({world.size}) "
                         f"x train.grad_accum ({tp.grad_accum})")
    tok = load_tokenizer(model_dir)
    mask_id = mask_token_id(tok, dp.mask_token, info.vocab_size)
    embed_w, head_w = load_io_weights(model_dir)
    train_seqs, val_seqs, data_id = _rows(params, tp, world, info, inputs)
    if not len(train_seqs):
        raise ValueError(f"{inputs.tokens if tp.features == 'online' else inputs.hidden}: no training sequences")
    config = drafter_config(load_config(model_dir), dp, info.target_layer_ids, mask_id)
    drafter = build_drafter(config, tp.seed)
    if tp.init == "target":
        lines = init_from_target(drafter, model_dir, info)
        if world.main:
            print("\n".join(f"train: init {line}" for line in lines), flush=True)
    resume = Resume(state, fingerprint(tp.model_dump(), dp.model_dump(), data_id), tp.checkpoint_every,
                    tp.keep_checkpoints)
    t0 = time.perf_counter()
    live = LiveLog(plots["live"] if world.main else None)
    try:
        log = train(drafter, embed_w, head_w, train_seqs, val_seqs, dp, tp, mask_id, world, resume, live)
    finally:
        live.close()
        train_seqs.close()
        val_seqs.close()
    elapsed = time.perf_counter() - t0
    if tp.parallel == "fsdp" and world.size > 1:  # the full weights, gathered from every process's shard
        full, _ = fsdp.full_state(drafter)
        if world.main:
            drafter = build_drafter(config, tp.seed)
            drafter.load_state_dict(full)
    if not world.main:
        return
    drafter.to("cpu")
    _save(drafter, out)
    _report(log, dp, tp, drafter, world, elapsed, len(train_seqs), len(val_seqs), mask_id, metrics, plots)


def _save(drafter, out: Path) -> None:
    """The drafter's files into `out`, each replaced whole (other files there, such as the
    model card, belong to other stages and stay)."""
    tmp = temp_beside(out)
    try:
        save_drafter(drafter, tmp)
        out.mkdir(parents=True, exist_ok=True)
        for name in DRAFTER_FILES:
            os.replace(tmp / name, out / name)
    finally:
        if tmp.exists():
            for f in tmp.iterdir():
                f.unlink()
            tmp.rmdir()


def _report(log, dp, tp, drafter, world, elapsed, n_train, n_val, mask_id, metrics_file, plots) -> None:
    B = dp.block_size
    last = log.steps[-1]
    tail = log.steps[-max(1, len(log.steps) // 10):]  # mean of the last 10% of steps
    ran = last["step"] - (log.resumed_from or 0)
    metrics = {"steps": last["step"], "train_loss": sum(s["loss"] for s in tail) / len(tail),
               "train_acc_1": sum(s["acc_1"] for s in tail) / len(tail), "seconds": round(elapsed, 1),
               "steps_per_second": round(ran / elapsed, 3) if ran else None,
               "resumed_from_step": log.resumed_from, "processes": world.size,
               "padding_fraction": round(log.padding_fraction, 4),
               "train_sequences": n_train, "val_sequences": n_val, "loss": tp.loss,
               "mask_token_id": mask_id, "mask_token": dp.mask_token,
               "drafter_parameters": sum(p.numel() for p in drafter.parameters()),
               "precision": "bfloat16" if use_bf16(tp.precision, world.device) else "float32"}
    if log.evals:
        ev = log.evals[-1]
        metrics.update({"val_loss": ev["loss"], "val_ce": ev["ce"], "val_acc_1": ev["acc_by_pos"][0],
                        "val_tau_estimate": ev["tau_estimate"]})
    write_json(metrics_file, metrics)
    final_acc = log.evals[-1]["acc_by_pos"] if log.evals else [last[f"acc_{k}"] for k in range(1, B)]
    write_tsv(plots["position"], ["position", "accuracy"], [[k + 1, a] for k, a in enumerate(final_acc)])
    print(f"train: {last['step']} steps in {elapsed:.0f}s, loss {metrics['train_loss']:.3f}, "
          f"padding {metrics['padding_fraction']:.1%}"
          + (f", val tau estimate {metrics['val_tau_estimate']:.3f}" if log.evals else ""))
