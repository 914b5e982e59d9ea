"""Hidden-state shards at a 27B target's width, bf16 and FP8: bytes per token, write and
read rates against the bf16 run and the disk's own sequential write rate, and peak memory
as the rows grow.

Synthetic activations of Qwen3.6-27B's width (hidden 5120; 5 captured layers + the final
state = 6 x 5120 columns a token) go through the stage's real writer (`write_shards`: the
plan, the streamed safetensors file with its hash, FP8 quantization where asked, fsync,
rename, the ledger, the merge into index.json and manifest.json), read from a real tokens
file of 2,000-token rows. No model runs: on a CPU a 5120-wide forward is far slower than
the disk, and the writer is what this measures. Each size runs in a fresh process so its
peak RSS is its own.

Reading: the training loader's own reader (`ShardRows`) copies every row out of the
shards, after their pages are dropped from the page cache (posix_fadvise DONTNEED), so
the disk is read. It stops at the stored dtype: FP8 is widened on the training device.

In each repetition the bf16 writer, the FP8 writer and the baseline (the same bytes as the
bf16 run written as 32 MB sequential writes to files of the same sizes, each fsynced, what
`dd` measures) run in a rotating order in the same process; the medians are compared.

    .venv/bin/python bench/bench_extract.py                 # 2 GB and 20 GB of bf16 states
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


FORMATS = ("bfloat16", "float8_e4m3fn")


def _child(args) -> dict:
    """One size, one process: a warm-up write (a process's first GB ran at a third of the
    rate of later ones here, whoever wrote it), then the two writers and the baseline in a
    rotating order."""
    folder = Path(args.dir)
    shutil.rmtree(folder, ignore_errors=True)  # a killed earlier run's files
    folder.mkdir(parents=True)
    import torch

    # One batch's worth of activations, made once: the writer's producer hands out slices of
    # it, and the baseline writes the same bytes (a storage layer that compresses or
    # deduplicates then treats both alike).
    pool = torch.randn(args.batch_tokens, (LAYERS + 1) * HIDDEN).to(torch.bfloat16)
    data = memoryview(pool.reshape(-1).view(torch.uint8).numpy())
    _baseline(folder / "warmup", [1_000_000_000], data)
    runs = ("bfloat16", "float8_e4m3fn", "baseline")
    reps = []
    for rep in range(args.repeats):
        got: dict = {}
        for what in runs[rep % 3 :] + runs[: rep % 3]:
            if what == "baseline":
                got["baseline_seconds"] = _baseline(folder / "baseline", _sizes(args.gb, args, "bfloat16"), data)
            else:
                got[what] = _writer(folder / "run", what, args, pool)
        reps.append(got)
    shutil.rmtree(folder)
    return {"reps": reps, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _rows(gb: float) -> int:
    """Rows of the run: `gb` of bf16 states (the FP8 run stores the same rows)."""
    from draftline.hidden.plan import Record

    return max(1, int(gb * 1e9 / Record(HIDDEN, LAYERS, "final").bytes_per_token) // ROW_TOKENS)


def _writer(folder: Path, state_dtype: str, args, pool) -> dict:
    """The stage's writer over a real tokens file of 2,000-token rows, timed from the plan
    to the merged index; then the reader over the shards, from the disk."""
    from draftline.hidden import ledger
    from draftline.hidden.merge import merge
    from draftline.hidden.plan import Record, plan
    from draftline.hidden.token_rows import TokenRows
    from draftline.hidden.write import write_shards
    from draftline.io import write_parquet

    record = Record(HIDDEN, LAYERS, "final", 0, state_dtype)
    folder.mkdir(parents=True)
    n_rows = _rows(args.gb)
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
    files = sorted(out.glob("shard-*.safetensors"))
    sizes = [f.stat().st_size for f in files]
    read_seconds = _read(out, files)
    shutil.rmtree(folder)
    return {"rows": n_rows, "tokens": the_plan.tokens, "shards": len(sizes), "bytes": sum(sizes),
            "arithmetic_bytes": the_plan.total_bytes, "seconds": seconds, "read_seconds": read_seconds}


def _read(out: Path, files: list[Path]) -> float:
    """Seconds for the training reader to copy every row out of the shards, from the disk."""
    from draftline.hidden.reader import ShardRows

    for f in files:  # written and fsynced: their clean pages can be dropped
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    t0 = time.perf_counter()
    rows = ShardRows(out)
    for i in range(len(rows)):
        rows[i]
    rows.close()
    return time.perf_counter() - t0


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


def _sizes(gb: float, args, state_dtype: str) -> list[int]:
    """The shard sizes of a run of `gb`, by the same plan (less each file's ~350-byte header)."""
    from draftline.hidden.plan import Record, plan

    p = plan([ROW_TOKENS] * _rows(gb), Record(HIDDEN, LAYERS, "final", 0, state_dtype), args.shard_bytes)
    return [p.shard_size(s) for s in p.shards]


def _median(values) -> float:
    return statistics.median(list(values))


def report(runs: list[dict]) -> None:
    first = runs[0]["reps"][0]
    for fmt in FORMATS:
        r = first[fmt]
        print(f"{fmt}: {r['arithmetic_bytes'] / r['tokens']:,.0f} B/token by arithmetic, "
              f"{r['bytes'] / r['tokens']:,.1f} on disk (headers included)")
    for run in runs:
        reps = run["reps"]
        r0 = reps[0]["bfloat16"]
        print(f"{r0['rows']} rows, {r0['tokens']:,} tokens, {len(reps)} repetitions, peak RSS {run['peak_rss_mb']:.0f} MB")
        rate = {}
        for fmt in FORMATS:
            w = _median(p[fmt]["bytes"] / p[fmt]["seconds"] / 1e9 for p in reps)
            r = _median(p[fmt]["bytes"] / p[fmt]["read_seconds"] / 1e9 for p in reps)
            wt = _median(p[fmt]["tokens"] / p[fmt]["seconds"] for p in reps)
            rt = _median(p[fmt]["tokens"] / p[fmt]["read_seconds"] for p in reps)
            rate[fmt] = (wt, rt)
            print(f"  {fmt:<14} {reps[0][fmt]['bytes'] / 1e9:6.2f} GB in {reps[0][fmt]['shards']} shards: "
                  f"write {w:.2f} GB/s = {wt:,.0f} tokens/s, read {r:.2f} GB/s = {rt:,.0f} tokens/s")
        base = _median(p["bfloat16"]["bytes"] / p["baseline_seconds"] / 1e9 for p in reps)
        bw = _median(p["bfloat16"]["bytes"] / p["bfloat16"]["seconds"] / 1e9 for p in reps)
        print(f"  sequential writes of the bf16 bytes: {base:.2f} GB/s (bf16 writer {bw / base:.2f}x)")
        print(f"  FP8 / bf16, tokens/s: write {rate['float8_e4m3fn'][0] / rate['bfloat16'][0]:.2f}x, "
              f"read {rate['float8_e4m3fn'][1] / rate['bfloat16'][1]:.2f}x")
    if len(runs) > 1:
        print(f"peak RSS at the larger size: {runs[1]['peak_rss_mb'] / runs[0]['peak_rss_mb']:.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=2.0, help="stored bf16 states of the smaller run, GB")
    ap.add_argument("--scale", type=int, default=10, help="the larger run is this many times more rows (1: one size)")
    ap.add_argument("--shard-bytes", type=int, default=1_000_000_000)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--dir", default=".bench-extract")
    ap.add_argument("--repeats", type=int, default=3, help="rotations of bf16 writer, FP8 writer, baseline per size")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args)))
        return
    runs = []
    for gb in (args.gb,) if args.scale == 1 else (args.gb, args.gb * args.scale):
        cmd = [sys.executable, __file__, "--child", "--gb", str(gb), "--shard-bytes", str(args.shard_bytes),
               "--batch-tokens", str(args.batch_tokens), "--repeats", str(args.repeats), "--dir", args.dir]
        runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True,
                                              env=dict(os.environ, DRAFTLINE_NO_PROGRESS="1")).stdout.splitlines()[-1]))
    report(runs)


if __name__ == "__main__":
    main()
