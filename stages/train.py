"""Stage `train`: train the DFlash drafter on the stored hidden states.

    python -m stages.train   # writes data/drafter/{config.json,model.safetensors},
                             # data/metrics/train.json, data/plots/train_*.tsv
"""

import time
from pathlib import Path

import torch

from draftline import target as tgt
from draftline.drafter.model import build_drafter, drafter_config, mask_token_id
from draftline.drafter.train import train, use_bf16
from draftline.hidden_store import load_sequences, read_index
from draftline.io import atomic_path, write_json, write_tsv

from ._run import main

MODEL = Path("data/target/model")
INFO = Path("data/target/info.json")
HIDDEN = Path("data/hidden")
OUT = Path("data/drafter")
METRICS = Path("data/metrics/train.json")
STEPS_PLOT = Path("data/plots/train_steps.tsv")
EVAL_PLOT = Path("data/plots/train_eval.tsv")
POS_PLOT = Path("data/plots/train_position_acc.tsv")


def run(params) -> None:
    dp, tp = params.drafter, params.train
    info = tgt.TargetInfo.load(INFO)
    index = read_index(HIDDEN)
    if index["target_layer_ids"] != info.target_layer_ids:
        raise ValueError(f"{HIDDEN}: extracted layers {index['target_layer_ids']} differ from "
                         f"{info.target_layer_ids} in {INFO}; rerun extract")
    target = tgt.load_model(MODEL, "float32")
    tok = tgt.load_tokenizer(MODEL)
    mask_id = mask_token_id(tok, dp.mask_token)
    embed_w = target.get_input_embeddings().weight.detach()
    head_w = target.get_output_embeddings().weight.detach()
    train_seqs = load_sequences(HIDDEN, "train")
    val_seqs = load_sequences(HIDDEN, "val")
    config = drafter_config(target.config, dp, info.target_layer_ids, mask_id)
    drafter = build_drafter(config, tp.seed)
    t0 = time.perf_counter()
    log = train(drafter, embed_w, head_w, train_seqs, val_seqs, dp, tp, mask_id)
    elapsed = time.perf_counter() - t0
    with atomic_path(OUT) as tmp:
        drafter.save_pretrained(str(tmp), safe_serialization=True)
    B = dp.block_size
    last = log.steps[-1]
    tail = log.steps[-max(1, len(log.steps) // 10):]  # mean of the last 10% of steps
    metrics = {"steps": last["step"], "train_loss": sum(s["loss"] for s in tail) / len(tail),
               "train_acc_1": sum(s["acc_1"] for s in tail) / len(tail), "seconds": round(elapsed, 1),
               "steps_per_second": round(last["step"] / elapsed, 3), "train_sequences": len(train_seqs),
               "val_sequences": len(val_seqs), "mask_token_id": mask_id, "mask_token": dp.mask_token,
               "drafter_parameters": sum(p.numel() for p in drafter.parameters()),
               "precision": "bfloat16" if use_bf16(tp.precision) else "float32"}
    if log.evals:
        metrics["val_loss"] = log.evals[-1]["loss"]
        metrics["val_acc_1"] = log.evals[-1]["acc_by_pos"][0]
    write_json(METRICS, metrics)
    cols = ["step", "epoch", "loss", "lr", "grad_norm", "slots", "seconds"] + [f"acc_{k}" for k in range(1, B)]
    write_tsv(STEPS_PLOT, cols, [[s[c] for c in cols] for s in log.steps])
    write_tsv(EVAL_PLOT, ["step", "val_loss", "val_acc_1"],
              [[e["step"], e["loss"], e["acc_by_pos"][0]] for e in log.evals])
    final_acc = log.evals[-1]["acc_by_pos"] if log.evals else [last[f"acc_{k}"] for k in range(1, B)]
    write_tsv(POS_PLOT, ["position", "accuracy"], [[k + 1, a] for k, a in enumerate(final_acc)])
    print(f"train: {last['step']} steps in {elapsed:.0f}s, loss {metrics['train_loss']:.3f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    main(run)
