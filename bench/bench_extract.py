"""Hidden-state shards at a 27B target's width: bytes per token, write rate against the
disk's own sequential write rate, and peak memory as the rows grow 10x.

Synthetic activations of Qwen3.6-27B's width (hidden 5120; 5 captured layers + the final
state = 6 x 5120 bf16 columns a token) go through the stage's real writer (`write_shards`:
the plan, the streamed safetensors file with its hash, fsync, rename, the ledger, the
merge into index.json and manifest.json), read from a real tokens file of 2,000-token rows.
No model runs: on a CPU a 5120-wide forward is far slower than the disk, and the writer is
what this measures. Each size runs in a fresh process so its peak RSS is its own.

The baseline, in the same process and on the same filesystem: the same number of bytes
written as 32 MB sequential writes to files of the same sizes, each fsynced (what `dd`
measures), alternating with the writer, the order flipped in each pair; the medians of the
two rates are compared.

    .venv/bin/python bench/bench_extract.py                 # 2 GB and 20 GB, into ./.bench-extract
    .venv/bin/python bench/bench_extract.py --gb 0.5 --scale 4 --dir /mnt/nvme
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

HIDDEN, LAYERS, ROW_TOKENS = 5120, 5, 2000


def _child(args) -> dict:
    """One size, one process: a warm-up write (a process's first GB ran at a third of the
    rate of later ones here, whoever wrote it), then the writer and the baseline alternating."""
    from draftline.hidden.plan import Record

    folder = Path(args.dir)
    shutil.rmtree(folder, ignore_errors=True)  # a killed earlier run's files
    folder.mkdir(parents=True)
    import torch

    record = Record(HIDDEN, LAYERS, "final")
    # One batch's worth of activations, made once: the writer's producer hands out slices of
    # it, and the baseline writes the same bytes (a storage layer that compresses or
    # deduplicates then treats both alike).
    pool = torch.randn(args.batch_tokens, record.state_columns).to(torch.bfloat16)
    data = memoryview(pool.reshape(-1).view(torch.uint8).numpy())
    _baseline(folder / "warmup", [1_000_000_000], data)
    pairs = []
    for rep in range(args.repeats):
        pair = {}
        for what in (("writer", "baseline") if rep % 2 == 0 else ("baseline", "writer")):
            if what == "writer":
                pair |= _writer(folder / "run", record, args, pool)
            else:
                pair["baseline_seconds"] = _baseline(folder / "baseline", pair.get("sizes") or _sizes(args.gb, args),
                                                     data)
        pairs.append(pair)
    shutil.rmtree(folder)
    return {"pairs": pairs, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _writer(folder: Path, record, args, pool) -> dict:
    """The stage's writer over a real tokens file of 2,000-token rows, timed from the plan
    to the merged index."""
    from draftline.hidden import ledger
    from draftline.hidden.merge import merge
    from draftline.hidden.plan import plan
    from draftline.hidden.token_rows import TokenRows
    from draftline.hidden.write import write_shards
    from draftline.io import write_parquet

    folder.mkdir(parents=True)
    n_rows = max(1, int(args.gb * 1e9 / record.bytes_per_token) // ROW_TOKENS)
    write_parquet(folder / "tokens.parquet",
                  [{"id": f"r{i}", "split": "train", "input_ids": [i % 1000] * ROW_TOKENS,
                    "loss_mask": [1] * ROW_TOKENS} for i in range(n_rows)])
    def produce(shard_rows):
        n = sum(len(r["input_ids"]) for r in shard_rows)
        for s in range(0, n, args.batch_tokens):
            yield pool[: min(args.batch_tokens, n - s)], None, None

    out = folder / "hidden"
    out.mkdir()
    os.sync()  # start clean: the previous run's deleted files' writeback is not this run's cost
    t0 = time.perf_counter()
    rows = TokenRows.read(folder / "tokens.parquet")
    the_plan = plan(rows.lengths, record, args.shard_bytes)
    write_shards(produce, rows, the_plan, list(the_plan.shards), out, [1, 16, 31, 46, 61])
    merge(out, None, [1, 16, 31, 46, 61], record, the_plan,
          ledger.done(out, {s.index: s.name for s in the_plan.shards}))
    seconds = time.perf_counter() - t0
    sizes = [f.stat().st_size for f in sorted(out.glob("shard-*.safetensors"))]
    shutil.rmtree(folder)
    return {"rows": n_rows, "tokens": the_plan.tokens, "shards": len(sizes), "bytes": sum(sizes),
            "arithmetic_bytes": the_plan.total_bytes, "seconds": seconds, "sizes": sizes}


def _baseline(folder: Path, sizes: list[int], data: memoryview) -> float:
    """Seconds to write files of `sizes` bytes of `data`, over and over, sequentially in
    32 MB writes, each file fsynced."""
    folder.mkdir(parents=True, exist_ok=True)
    os.sync()
    t0 = time.perf_counter()
    for i, size in enumerate(sizes):
        with open(folder / f"base-{i}", "wb") as f:
            left, at = size, 0
            while left > 0:
                n = min(32 << 20, left, len(data) - at)
                left -= f.write(data[at : at + n])
                at = (at + n) % len(data)
            f.flush()
            os.fsync(f.fileno())
    seconds = time.perf_counter() - t0
    shutil.rmtree(folder)
    return seconds


def _sizes(gb: float, args) -> list[int]:
    """The shard sizes of a run of `gb`, by the same plan (less each file's ~350-byte header)."""
    from draftline.hidden.plan import Record, plan

    record = Record(HIDDEN, LAYERS, "final")
    n_rows = max(1, int(gb * 1e9 / record.bytes_per_token) // ROW_TOKENS)
    p = plan([ROW_TOKENS] * n_rows, record, args.shard_bytes)
    return [p.shard_size(s) for s in p.shards]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=2.0, help="stored states of the smaller run, GB")
    ap.add_argument("--scale", type=int, default=10, help="the larger run is this many times more rows")
    ap.add_argument("--shard-bytes", type=int, default=1_000_000_000)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--dir", default=".bench-extract")
    ap.add_argument("--repeats", type=int, default=4, help="writer/baseline pairs per size (even: each first half the time)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args)))
        return
    runs = []
    for gb in (args.gb, args.gb * args.scale):
        cmd = [sys.executable, __file__, "--child", "--gb", str(gb), "--shard-bytes", str(args.shard_bytes),
               "--batch-tokens", str(args.batch_tokens), "--repeats", str(args.repeats), "--dir", args.dir]
        runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                              env=dict(os.environ, DRAFTLINE_NO_PROGRESS="1")).stdout.splitlines()[-1]))
    first = runs[0]["pairs"][0]
    print(f"27B width: {HIDDEN} x ({LAYERS} layers + final) bf16 + ids + mask = "
          f"{first['arithmetic_bytes'] / first['tokens']:.0f} B/token by arithmetic")
    for run in runs:
        for pair in run["pairs"]:
            rate, base_rate = pair["bytes"] / pair["seconds"] / 1e9, pair["bytes"] / pair["baseline_seconds"] / 1e9
            print(f"{pair['rows']:>6} rows {pair['tokens']:>9} tokens {pair['shards']:>3} shards "
                  f"{pair['bytes'] / 1e9:6.2f} GB: {pair['bytes'] / pair['tokens']:.1f} B/token on disk "
                  f"({pair['bytes'] / pair['arithmetic_bytes']:.6f}x arithmetic); writer {rate:.2f} GB/s, "
                  f"sequential {base_rate:.2f} GB/s")
        # Whichever runs first in a pair is often the slower (the deleted files of the run
        # before); each goes first in half the pairs, so the medians of the rates compare.
        w = statistics.median(p["bytes"] / p["seconds"] / 1e9 for p in run["pairs"])
        b = statistics.median(p["bytes"] / p["baseline_seconds"] / 1e9 for p in run["pairs"])
        print(f"  medians over {len(run['pairs'])} pairs: writer {w:.2f} GB/s, sequential {b:.2f} GB/s = {w / b:.2f}x; "
              f"peak RSS {run['peak_rss_mb']:.0f} MB")
    print(f"peak RSS at {args.scale}x the rows: {runs[1]['peak_rss_mb'] / runs[0]['peak_rss_mb']:.3f}x")


if __name__ == "__main__":
    main()
