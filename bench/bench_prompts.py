"""The whole `download` + `mix` at 10M synthetic prompts from a local Parquet file: time
and peak memory of each stage, as its metrics record them.

The prompts are bench_dedupe's synthetic corpus (blocks of 1M: Zipf words, 20% planted
near-duplicates, a quarter of them whitespace and case noise that exact dedupe catches),
in a `prompt` column with no category (the rule categorises them), plus HumanEval held
out as eval prompts (decontamination runs against them). Both stages run as a user runs
them, `draftline --params P download ...` then `mix ...`, each in its own process with
the repository's params but for the sources and the category weights: `chat: 1` alone,
the category the rule gives nearly all of these texts (the few it calls coding are
counted and left out), so the mix is as large as the data allows.

    .venv/bin/python bench/bench_prompts.py               # 10M prompts
    .venv/bin/python bench/bench_prompts.py --n 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from _setup import PARAMS
from bench_dedupe import make_corpus


def write_prompts(path: Path, n: int) -> None:
    with pq.ParquetWriter(path, pa.schema([("prompt", pa.large_string())])) as w:
        for b, lo in enumerate(range(0, n, 1_000_000)):
            texts, _, _ = make_corpus(min(1_000_000, n - lo), 0.2, seed=b)
            w.write_table(pa.table({"prompt": pa.array(texts, pa.large_string())}))


def stage(params: Path, *args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "draftline", "--params", str(params), "--no-progress", *args], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--dir", default=None, help="working folder (default: a temporary one)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        d = Path(d)
        t0 = time.perf_counter()
        write_prompts(d / "synthetic.parquet", a.n)
        print(f"{a.n:,} prompts written in {time.perf_counter() - t0:.0f} s "
              f"({(d / 'synthetic.parquet').stat().st_size / 1e9:.2f} GB)", file=sys.stderr, flush=True)
        params = yaml.safe_load(PARAMS.read_text())
        params["download"]["sources"] = [
            {"name": "synthetic", "kind": "local", "path": str(d / "synthetic.parquet"), "prompt_field": "prompt"},
            {"name": "humaneval", "kind": "humaneval", "role": "eval", "category": "humaneval"},
        ]
        params["mix"]["category_weights"] = {"chat": 1}
        params["mix"]["total"] = None
        (d / "params.yaml").write_text(yaml.safe_dump(params))
        walls = {"download": stage(d / "params.yaml", "download", "--inputs", str(d), "--out", str(d / "prompts.parquet"),
                                   "--metrics", str(d / "download.json")),
                 "mix": stage(d / "params.yaml", "mix", "--prompts", str(d / "prompts.parquet"),
                              "--train", str(d / "train.parquet"), "--eval", str(d / "eval.parquet"),
                              "--metrics", str(d / "mix.json"), "--plot", str(d / "mix.tsv"))}
        down, mix = (json.loads((d / f"{s}.json").read_text()) for s in ("download", "mix"))
    print(f"\n{a.n:,} synthetic prompts (+164 HumanEval eval prompts), from local Parquet\n")
    print("| stage | wall time (process) | stage time | rows/s | peak RSS |")
    print("| --- | --- | --- | --- | --- |")
    for name, m in (("download", down), ("mix", mix)):
        c = m["cost"]
        print(f"| {name} | {walls[name]:.1f} s | {c['seconds']:.1f} s | {c['rows_per_second']:,.0f} | "
              f"{c['peak_rss_mb']:,.0f} MB |")
    print(f"| both | {sum(walls.values()):.1f} s | | | {max(down['cost']['peak_rss_mb'], mix['cost']['peak_rss_mb']):,.0f} MB |")
    keys = ("train_before", "duplicates_removed", "near_duplicates_removed", "contaminated_removed", "train_after",
            "val_after", "near_dedupe", "by_category_before")
    print("\nmix:", json.dumps({k: mix[k] for k in keys}))


if __name__ == "__main__":
    main()
