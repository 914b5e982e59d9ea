"""Stage `benchmark`: greedy speculative decoding vs plain decoding on held-out prompts.

    python -m stages.benchmark   # writes data/bench/results.jsonl, data/metrics/benchmark.json,
                                 # data/plots/acceptance.tsv
"""

from pathlib import Path

import torch

from draftline import target as tgt
from draftline.benchmark import BenchmarkFailure, run_benchmark
from draftline.drafter.model import build_drafter, load_drafter
from draftline.io import read_parquet, write_json, write_parquet, write_tsv

from ._run import main

MODEL = Path("data/target/model")
INFO = Path("data/target/info.json")
DRAFTER = Path("data/drafter")
EVAL = Path("data/mix/eval.parquet")
RESULTS = Path("data/bench/results.parquet")
METRICS = Path("data/metrics/benchmark.json")
PLOT = Path("data/plots/acceptance.tsv")


def run(params) -> None:
    bp = params.benchmark
    info = tgt.TargetInfo.load(INFO)
    target = tgt.load_model(MODEL, info.dtype)
    tok = tgt.load_tokenizer(MODEL)
    drafter = load_drafter(DRAFTER)
    untrained = None
    if bp.untrained_baseline:
        untrained = build_drafter(drafter.config, bp.seed).eval()
    prompts = read_parquet(EVAL)
    metrics, rows, hist = run_benchmark(target, tok, drafter, untrained, prompts, bp, info.eos_token_ids)
    write_parquet(RESULTS, rows)
    write_json(METRICS, metrics)
    write_tsv(PLOT, ["tokens_per_step", "drafter", "fraction"],
              [[k, name, f] for name, h in hist.items() for k, f in enumerate(h)])
    if metrics["mismatches"]:
        raise BenchmarkFailure(f"benchmark: {metrics['mismatches']} prompt(s) where speculative output differs "
                               f"from plain greedy output (see {RESULTS})")
    print(f"benchmark: tau {metrics['tau']:.3f} (untrained {metrics.get('tau_untrained', float('nan')):.3f}), "
          f"speedup {metrics['speedup']:.2f}x")


if __name__ == "__main__":
    torch.manual_seed(0)
    main(run)
