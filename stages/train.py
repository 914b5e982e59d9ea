"""Stage `train`: train the DFlash drafter on the stored hidden states.

    python -m stages.train                              # one process
    torchrun --nproc_per_node N -m stages.train         # data parallel (NCCL on GPUs, gloo on CPUs)

Writes data/drafter/{config.json,model.safetensors}, data/metrics/train.json and
data/plots/train_*.tsv; keeps resume state in data/train_state (a killed run continues
from its last checkpoint when rerun with the same params, data and code).
"""

import time
from pathlib import Path

import torch

from draftline import target as tgt
from draftline.drafter import dist
from draftline.drafter.checkpoint import fingerprint
from draftline.drafter.model import (build_drafter, drafter_config, init_from_target, mask_token_id, save_drafter,
                                     target_init_layers)
from draftline.drafter.step import use_bf16
from draftline.drafter.train import Resume, train
from draftline.hidden_store import load_sequences, read_index
from draftline.io import atomic_path, write_json, write_tsv

from ._run import main

MODEL = Path("data/target/model")
INFO = Path("data/target/info.json")
HIDDEN = Path("data/hidden")
STATE = Path("data/train_state")
OUT = Path("data/drafter")
METRICS = Path("data/metrics/train.json")
STEPS_PLOT = Path("data/plots/train_steps.tsv")
EVAL_PLOT = Path("data/plots/train_eval.tsv")
POS_PLOT = Path("data/plots/train_position_acc.tsv")


def run(params) -> None:
    dp, tp = params.drafter, params.train
    world = dist.init()
    try:
        _train(params, dp, tp, world)
    finally:
        dist.close(world)


def _train(params, dp, tp, world) -> None:
    info = tgt.TargetInfo.load(INFO)
    index = read_index(HIDDEN)
    if index["target_layer_ids"] != info.target_layer_ids:
        raise ValueError(f"{HIDDEN}: extracted layers {index['target_layer_ids']} differ from "
                         f"{info.target_layer_ids} in {INFO}; rerun extract")
    if tp.batch_size % (world.size * tp.grad_accum):
        raise ValueError(f"train.batch_size ({tp.batch_size}) must be a multiple of processes ({world.size}) "
                         f"x train.grad_accum ({tp.grad_accum})")
    tok = tgt.load_tokenizer(MODEL)
    mask_id = mask_token_id(tok, dp.mask_token)
    embed_w, head_w = tgt.load_io_weights(MODEL)
    train_seqs = load_sequences(HIDDEN, "train")
    val_seqs = load_sequences(HIDDEN, "val")
    if not train_seqs:
        raise ValueError(f"{HIDDEN}: no training sequences")
    config = drafter_config(tgt.load_config(MODEL), dp, info.target_layer_ids, mask_id)
    drafter = build_drafter(config, tp.seed)
    if tp.init == "target":
        layers = target_init_layers(info.num_hidden_layers, info.target_layer_ids, dp.num_layers)
        init_from_target(drafter, *tgt.load_layer_weights(MODEL, layers))
    resume = Resume(STATE, fingerprint(tp.model_dump(), dp.model_dump(), index), tp.checkpoint_every,
                    tp.keep_checkpoints)
    t0 = time.perf_counter()
    log = train(drafter, embed_w, head_w, train_seqs, val_seqs, dp, tp, mask_id, world, resume)
    elapsed = time.perf_counter() - t0
    if not world.main:
        return
    drafter.to("cpu")
    with atomic_path(OUT) as tmp:
        save_drafter(drafter, tmp)
    _report(log, dp, tp, drafter, world, elapsed, len(train_seqs), len(val_seqs), mask_id)


def _report(log, dp, tp, drafter, world, elapsed, n_train, n_val, mask_id) -> None:
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
        metrics.update({"val_loss": ev["loss"], "val_acc_1": ev["acc_by_pos"][0],
                        "val_tau_estimate": ev["tau_estimate"]})
    write_json(METRICS, metrics)
    cols = ["step", "epoch", "loss", "lr", "grad_norm", "slots", "padding", "seconds"]
    cols += [f"acc_{k}" for k in range(1, B)]
    write_tsv(STEPS_PLOT, cols, [[s[c] for c in cols] for s in log.steps])
    write_tsv(EVAL_PLOT, ["step", "val_loss", "val_acc_1", "val_tau_estimate"],
              [[e["step"], e["loss"], e["acc_by_pos"][0], e["tau_estimate"]] for e in log.evals])
    final_acc = log.evals[-1]["acc_by_pos"] if log.evals else [last[f"acc_{k}"] for k in range(1, B)]
    write_tsv(POS_PLOT, ["position", "accuracy"], [[k + 1, a] for k, a in enumerate(final_acc)])
    print(f"train: {last['step']} steps in {elapsed:.0f}s, loss {metrics['train_loss']:.3f}, "
          f"padding {metrics['padding_fraction']:.1%}"
          + (f", val tau estimate {metrics['val_tau_estimate']:.3f}" if log.evals else ""))


if __name__ == "__main__":
    torch.manual_seed(0)
    main(run)
