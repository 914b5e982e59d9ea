"""Stage `benchmark`: speculative decoding with the drafter vs the target alone and baselines.

    python -m stages.benchmark   # writes data/bench/results.parquet, data/metrics/benchmark.json,
                                 # data/plots/acceptance.tsv, data/plots/acceptance_by_position.tsv
"""

from pathlib import Path

import torch

from draftline import target as tgt
from draftline.devices import compute_device
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
HIST_PLOT = Path("data/plots/acceptance.tsv")
POS_PLOT = Path("data/plots/acceptance_by_position.tsv")


def run(params) -> None:
    bp = params.benchmark
    info = tgt.TargetInfo.load(INFO)
    device = compute_device()
    target = tgt.load_model(MODEL, info.dtype, device)
    tok = tgt.load_tokenizer(MODEL)
    drafter = load_drafter(DRAFTER).to(device)
    drafters = {"dflash": drafter}
    if "untrained" in bp.baselines:
        drafters["untrained"] = build_drafter(drafter.config, bp.seed).to(device).eval()
    prompts = read_parquet(EVAL)
    B = drafter.block_size
    metrics, rows = run_benchmark(target, tok, drafters, prompts, bp, info.eos_token_ids, B)
    metrics["device"] = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    write_parquet(RESULTS, rows)
    write_json(METRICS, metrics)
    _plots(metrics, B)
    if metrics["mismatches"]:
        raise BenchmarkFailure(f"benchmark: {metrics['mismatches']} greedy decode(s) differ from the target's "
                               f"greedy output (see {RESULTS})")
    print(f"benchmark: tau {metrics['tau']:.3f}, speedup {metrics['speedup']:.2f}x over "
          f"{metrics['requests']} requests")


def _plots(metrics: dict, B: int) -> None:
    """One column per benchmark (and temperature): `dvc plots diff` overlays revisions."""
    series = {}
    for key, section in metrics.items():
        if not isinstance(section, dict):
            continue
        for src, entry in section.items():
            if "dflash" in entry:
                series[src if key == "greedy" else f"{src}_{key}"] = entry["dflash"]
    names = sorted(series)
    write_tsv(HIST_PLOT, ["tokens_per_step"] + names,
              [[k] + [series[n]["histogram"][k] for n in names] for k in range(1, B + 1)])
    write_tsv(POS_PLOT, ["position"] + names,
              [[k] + [series[n]["position_acceptance"][k - 1] for n in names] for k in range(1, B)])


if __name__ == "__main__":
    torch.manual_seed(0)
    main(run)
