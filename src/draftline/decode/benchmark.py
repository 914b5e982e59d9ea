"""Stage `benchmark`: speculative decoding with the drafter vs the target alone and baselines.

    draftline benchmark --model DIR --info FILE --drafter DIR --eval FILE --results FILE --metrics FILE ...

Ends by writing the drafter's model card (card.py) beside its weights.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..command import path_option, run_stage
from ..devices import compute_device, describe
from ..drafter.model import build_drafter, load_drafter
from ..io import read_parquet, write_json, write_parquet, write_tsv
from ..target.info import TargetInfo
from ..target.load import load_model, load_tokenizer
from .card import write_card
from .measure import BenchmarkFailure, run_benchmark


def run(params, model_dir: Path, info_file: Path, drafter_dir: Path, eval_file: Path, results: Path,
        metrics_file: Path, hist_plot: Path, pos_plot: Path, card: Path, device=None,
        device_map: str | None = None) -> None:
    bp = params.benchmark
    info = TargetInfo.load(info_file)
    device = device or compute_device()
    target = load_model(model_dir, info.dtype, device, device_map)
    device = target.device  # with a device map, the first device: where inputs and the drafter go
    tok = load_tokenizer(model_dir)
    drafter = load_drafter(drafter_dir).to(device)
    drafters = {"dflash": drafter}
    if "untrained" in bp.baselines:
        drafters["untrained"] = build_drafter(drafter.config, bp.seed).to(device).eval()
    prompts = read_parquet(eval_file)
    B = drafter.block_size
    metrics, rows = run_benchmark(target, tok, drafters, prompts, bp, info.eos_token_ids, B,
                                  params.chat.template_kwargs())
    metrics["device"] = describe(device)
    write_parquet(results, rows)
    write_json(metrics_file, metrics)
    _plots(metrics, B, hist_plot, pos_plot)
    if metrics["mismatches"]:
        raise BenchmarkFailure(f"benchmark: {metrics['mismatches']} greedy decode(s) differ from the target's "
                               f"greedy output (see {results})")
    write_card(drafter_dir, info_file, metrics_file, card)
    parts = ""
    if "reasoning_end" in metrics:
        parts = f" (reasoning {_fmt(metrics['tau_reasoning'])}, answer {_fmt(metrics['tau_answer'])})"
    print(f"benchmark: tau {metrics['tau']:.3f}{parts}, speedup {metrics['speedup']:.2f}x over "
          f"{metrics['requests']} requests; model card {card}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _plots(metrics: dict, B: int, hist_plot: Path, pos_plot: Path) -> None:
    """One column per benchmark (and temperature): `dvc plots diff` overlays revisions."""
    series = {}
    for key, section in metrics.items():
        if not isinstance(section, dict):
            continue
        for src, entry in section.items():
            if "dflash" in entry:
                series[src if key == "greedy" else f"{src}_{key}"] = entry["dflash"]
    names = sorted(series)
    write_tsv(hist_plot, ["tokens_per_step"] + names,
              [[k] + [series[n]["histogram"][k] for n in names] for k in range(1, B + 1)])
    write_tsv(pos_plot, ["position"] + names,
              [[k] + [series[n]["position_acceptance"][k - 1] for n in names] for k in range(1, B)])


@click.command("benchmark")
@path_option("--model", "target_model", "Reads: the target.")
@path_option("--info", "target_info", "Reads: its dtype and end-of-sequence ids.")
@path_option("--drafter", "drafter", "Reads: the trained drafter.")
@path_option("--eval", "mix_eval", "Reads: the held-out benchmark prompts.")
@path_option("--results", "bench_results", "Writes: one row per request and method (tokens, steps, acceptance).")
@path_option("--metrics", "benchmark_metrics", "Writes: tau, tokens/s and speedup per eval source and method.")
@path_option("--histogram-plot", "acceptance_plot", "Writes: share of verify steps per tokens produced (a dvc plot).")
@path_option("--position-plot", "acceptance_position_plot", "Writes: acceptance per drafted position (a dvc plot).")
@path_option("--card", "drafter_card", "Writes: the drafter's model card (README.md beside its weights).")
@click.pass_obj
def command(settings, model, info, drafter, eval, results, metrics, histogram_plot, position_plot, card):
    """Speculative decoding vs the target alone; the model card.

    Params: `benchmark`, `chat`. The held-out prompts decoded by the target alone, with the drafter
    and with baselines; any greedy output that differs from the target's fails the stage."""
    run_stage(settings, lambda params: run(params, model, info, drafter, eval, results, metrics, histogram_plot,
                                           position_plot, card, compute_device(settings.device),
                                           settings.target_device_map))
