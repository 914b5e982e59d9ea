"""Stage `benchmark`: speculative decoding with the drafter vs the target alone and baselines.

    draftline benchmark --model DIR --info FILE --drafter DIR --eval FILE --results FILE --metrics FILE ...

Ends by writing the drafter's model card (card.py) beside its weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..devices import compute_device, describe
from ..drafter.model import build_drafter, load_drafter
from ..io import read_parquet, write_json, write_parquet, write_tsv
from ..target.info import TargetInfo
from ..target.load import load_model, load_tokenizer
from .card import write_card
from .measure import BenchmarkFailure, run_benchmark


@dataclass(frozen=True)
class BenchmarkFiles:
    """What the stage writes."""

    results: Path  # one row per request and method
    metrics: Path  # tau, tokens/s and speedup per eval source and method
    hist_plot: Path  # share of verify steps per tokens produced (a dvc plot)
    pos_plot: Path  # acceptance per drafted position (a dvc plot)
    card: Path  # the drafter's model card, beside its weights


def run(params, model_dir: Path, info_file: Path, drafter_dir: Path, eval_file: Path, out: BenchmarkFiles,
        device=None, device_map: str | None = None) -> None:
    """Load, decode every held-out prompt by each method, write `out` (the card last, and only
    when every greedy decode matched the target's)."""
    info = TargetInfo.load(info_file)
    target, tok, drafters = _load(params.benchmark, model_dir, info, drafter_dir, device or compute_device(),
                                  device_map)
    B = drafters["dflash"].block_size
    metrics, rows = run_benchmark(target, tok, drafters, read_parquet(eval_file), params.benchmark,
                                  info.eos_token_ids, B, params.chat.template_kwargs())
    metrics["device"] = describe(target.device)
    _write(out, metrics, rows, B)
    if metrics["mismatches"]:
        raise BenchmarkFailure(f"benchmark: {metrics['mismatches']} greedy decode(s) differ from the target's "
                               f"greedy output (see {out.results})")
    write_card(drafter_dir, info_file, out.metrics, out.card)
    print(_summary(metrics, out.card))


def _load(bp, model_dir: Path, info: TargetInfo, drafter_dir: Path, device, device_map: str | None):
    """The target, its tokenizer and the drafters to measure: the trained one ("dflash") and
    the baselines' ("untrained"), on the device the target's inputs go to."""
    target = load_model(model_dir, info.dtype, device, device_map)
    device = target.device  # with a device map, the first device: where inputs and the drafter go
    tok = load_tokenizer(model_dir)
    drafter = load_drafter(drafter_dir).to(device)
    drafters = {"dflash": drafter}
    if "untrained" in bp.baselines:
        drafters["untrained"] = build_drafter(drafter.config, bp.seed).to(device).eval()
    return target, tok, drafters


def _write(out: BenchmarkFiles, metrics: dict, rows, B: int) -> None:
    """Written before the mismatch check, so a failed run leaves what it measured."""
    write_parquet(out.results, rows)
    write_json(out.metrics, metrics)
    _plots(metrics, B, out.hist_plot, out.pos_plot)


def _summary(metrics: dict, card: Path) -> str:
    parts = ""
    if "reasoning_end" in metrics:
        parts = f" (reasoning {_fmt(metrics['tau_reasoning'])}, answer {_fmt(metrics['tau_answer'])})"
    return (f"benchmark: tau {metrics['tau']:.3f}{parts}, speedup {metrics['speedup']:.2f}x over "
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
