"""Training on a 27B target's stored hidden states: streamed rows against rows in memory.

Synthetic shards at Qwen3.6-27B's width (hidden 5120; 5 captured layers + the final state
= 6 x 5120 bf16 columns a token), written by the extract stage's own writer, 2 GB and
20 GB of them. The trainer is the stage's loop (`drafter.loop.train`) on a one-layer DFlash
drafter of that width (its 25,600 -> 5,120 projection of the context features is the
work a step does per context token) with a small vocabulary, KL loss against the stored
final state, bf16 where the CPU has bf16 units.

Each run is a fresh process, so its peak RSS is its own:
  memory @ 2 GB   every row loaded up front as fp32 (train.loader: memory)
  stream @ 2 GB   rows read per step from the memory-mapped shards (train.loader: stream)
  stream @ 20 GB  the same, 10x the data (memory @ 20 GB would need 40 GB of RAM)
The 2 GB pair runs twice, the order flipped; steps/s is taken after the first steps (the
first step builds the teacher's head and pays for first touches) and compared by medians.

    .venv/bin/python bench/bench_train_stream.py                     # into ./.bench-train-stream
    .venv/bin/python bench/bench_train_stream.py --gb 0.5 --steps 6 --dir /mnt/nvme/x
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HIDDEN, LAYERS, ROW_TOKENS, VOCAB = 5120, 5, 512, 4096
LAYER_IDS = [1, 16, 31, 46, 61]


def _target_config():
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2048, num_hidden_layers=64,
                       num_attention_heads=8, num_key_value_heads=2, head_dim=128, max_position_embeddings=4096)


def _make(folder: Path, gb: float, shard_bytes: int) -> dict:
    """Shards of `gb` through the stage's writer; kept for the next run when complete."""
    import torch

    from draftline.hidden import ledger
    from draftline.hidden.merge import merge
    from draftline.hidden.plan import Record, plan
    from draftline.hidden.write import write_shards

    if (folder / "index.json").exists():
        return json.loads((folder / "manifest.json").read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    record = Record(HIDDEN, LAYERS, "final")
    n_rows = max(4, int(gb * 1e9 / record.bytes_per_token) // ROW_TOKENS)
    g = torch.Generator().manual_seed(0)
    rows = [{"id": f"r{i:07d}", "split": "val" if i % 50 == 49 else "train",
             "input_ids": torch.randint(0, VOCAB, (ROW_TOKENS,), generator=g).tolist(),
             "loss_mask": [0] * 64 + [1] * (ROW_TOKENS - 64)} for i in range(n_rows)]
    # Activations of a trained model's scale (a final state that gives a peaked teacher);
    # one pool, sliced per batch: generating 20 GB of normals would take longer than the runs.
    pool = (torch.randn(8192, record.state_columns, generator=g) * 2).to(torch.bfloat16)

    def produce(shard_rows):
        n, at = sum(len(r["input_ids"]) for r in shard_rows), 0
        while at < n:
            k = min(4096, n - at)
            yield pool[at % 4096 : at % 4096 + k], None, None
            at += k

    the_plan = plan([ROW_TOKENS] * n_rows, record, shard_bytes)
    write_shards(produce, rows, the_plan, list(the_plan.shards), folder, LAYER_IDS)
    merge(folder, None, LAYER_IDS, record, the_plan, ledger.done(folder, {s.index: s.name for s in the_plan.shards}))
    return json.loads((folder / "manifest.json").read_text())


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _train(folder: Path, loader: str, steps: int) -> dict:
    import torch

    from draftline.config.drafter import DrafterParams

    from draftline.config.train import TrainParams
    from draftline.drafter.data import open_rows
    from draftline.drafter.loop import train
    from draftline.drafter.model import build_drafter, drafter_config

    torch.manual_seed(0)
    dp = DrafterParams(num_layers=1, block_size=8)
    tp = TrainParams(loss="kl", num_anchors=16, prompt_anchors=0, batch_size=2, max_steps=steps, eval_every=10**6,
                     head_vocab=None, init="random", loader=loader, warmup_ratio=0.0)
    mask_id = VOCAB - 1
    drafter = build_drafter(drafter_config(_target_config(), dp, LAYER_IDS, mask_id), 0)
    embed = torch.randn(VOCAB, HIDDEN) * 0.02
    head = torch.randn(VOCAB, HIDDEN) * 0.02
    base_rss = _rss_mb()
    t0 = time.perf_counter()
    rows = open_rows(folder, "train", loader)
    load_seconds = time.perf_counter() - t0
    log = train(drafter, embed, head, rows, [], dp, tp, mask_id)
    rows.close()
    secs = [s["seconds"] for s in log.steps]
    skip = min(2, len(secs) - 1)
    return {"loader": loader, "steps": len(secs), "load_seconds": load_seconds,
            "steps_per_second": (len(secs) - skip) / (secs[-1] - secs[skip - 1]) if skip else len(secs) / secs[-1],
            "rss_before_data_mb": base_rss, "peak_rss_mb": _rss_mb(), "final_loss": log.steps[-1]["loss"]}


def _read_all(folder: Path) -> dict:
    """Every training row once, in a training epoch's batch order, through the stream
    loader's reader: the memory a whole pass over the set leaves behind."""
    from draftline.drafter.batching import epoch_batches
    from draftline.hidden.reader import ShardRows

    rows = ShardRows(folder, "train")
    base_rss = _rss_mb()
    t0, n = time.perf_counter(), 0
    for batch in epoch_batches(rows.lengths, rows.ids, 2, 0, 0):
        for i in batch:
            s = rows[i]
            n += s.context.numel() * 2 + s.final.numel() * 2
    seconds = time.perf_counter() - t0
    rows.close()
    return {"loader": "read", "rows": len(rows), "gb": n / 1e9, "gb_per_second": n / 1e9 / seconds,
            "rss_before_data_mb": base_rss, "peak_rss_mb": _rss_mb()}


def _child(args) -> dict:
    if args.child == "read":
        return _read_all(Path(args.dir))
    if args.child == "make":
        m = _make(Path(args.dir), args.gb, args.shard_bytes)
        return {"bytes": m["total_bytes"], "tokens": m["tokens"], "shards": len(m["shards"])}
    return _train(Path(args.dir), args.child, args.steps)


def _run(args, what: str, folder: Path, gb: float) -> dict:
    cmd = [sys.executable, __file__, "--child", what, "--gb", str(gb), "--dir", str(folder), "--steps",
           str(args.steps), "--shard-bytes", str(args.shard_bytes)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, DRAFTLINE_NO_PROGRESS="1"))
    if p.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=2.0, help="stored states of the smaller set, GB")
    ap.add_argument("--scale", type=int, default=10, help="the larger set is this many times more rows")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--shard-bytes", type=int, default=1_000_000_000)
    ap.add_argument("--dir", default=".bench-train-stream")
    ap.add_argument("--keep", action="store_true", help="keep the shards for another run")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args)))
        return
    root = Path(args.dir)
    small, large = root / "small", root / "large"
    sets = {"small": _run(args, "make", small, args.gb), "large": _run(args, "make", large, args.gb * args.scale)}
    for name, s in sets.items():
        print(f"{name}: {s['bytes'] / 1e9:.2f} GB, {s['tokens']} tokens, {s['shards']} shards")
    runs = []
    for order in (("memory", "stream"), ("stream", "memory")):
        for loader in order:
            runs.append({**_run(args, loader, small, args.gb), "set": "small"})
    runs.append({**_run(args, "stream", large, args.gb * args.scale), "set": "large"})
    reads = [{**_run(args, "read", folder, 0), "set": name} for name, folder in (("small", small), ("large", large))]
    for r in reads:
        print(f"a whole pass @ {r['set']:<5}: {r['rows']} rows, {r['gb']:.2f} GB of states read at "
              f"{r['gb_per_second']:.2f} GB/s, peak RSS {r['peak_rss_mb']:.0f} MB (before {r['rss_before_data_mb']:.0f} MB)")
    print(f"  peak RSS after a pass, large / small: {reads[1]['peak_rss_mb'] / reads[0]['peak_rss_mb']:.3f}x")
    for r in runs:
        print(f"{r['loader']:>6} @ {r['set']:<5}: {r['steps_per_second']:.3f} steps/s, peak RSS {r['peak_rss_mb']:.0f} MB "
              f"(before the data {r['rss_before_data_mb']:.0f} MB), loaded in {r['load_seconds']:.1f} s, "
              f"final loss {r['final_loss']:.4f}")

    def med(loader, key, where="small"):
        return statistics.median(r[key] for r in runs if r["loader"] == loader and r["set"] == where)

    print(f"steps/s, stream / memory @ small (medians of 2): "
          f"{med('stream', 'steps_per_second') / med('memory', 'steps_per_second'):.3f}x")
    print(f"peak RSS, stream @ large / stream @ small: {med('stream', 'peak_rss_mb', 'large') / med('stream', 'peak_rss_mb'):.3f}x; "
          f"memory @ small / stream @ small: {med('memory', 'peak_rss_mb') / med('stream', 'peak_rss_mb'):.3f}x")
    if not args.keep:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
