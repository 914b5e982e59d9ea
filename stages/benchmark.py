"""Stage `benchmark`: speculative decoding with the drafter vs the target alone and baselines.

    draftline benchmark --model DIR --info FILE --drafter DIR --eval FILE --results FILE --metrics FILE ...

The card stage then writes the drafter's model card from its metrics.

A published drafter (z-lab's config.json + model.safetensors) on the same target and
prompts, so its numbers compare with ours; its outputs go to a folder of its own:

    hf download z-lab/Qwen3-8B-DFlash-b16 --local-dir published/qwen3-8b-b16
    draftline benchmark --drafter published/qwen3-8b-b16 --out-dir scratch/qwen3-8b-b16
"""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from draftline import paths
from draftline.command import path_option, run_stage
from draftline.config.benchmark import BenchmarkParams
from draftline.config.chat import ChatParams
from draftline.config.view import Declared
from draftline.decode.benchmark import BenchmarkFiles, run
from draftline.devices import compute_device

PARAMS = Declared("benchmark", ("chat", "benchmark"), (ChatParams, BenchmarkParams))
# The output options, as click names them; --out-dir stands for all of them.
OUTPUTS = {"results": "--results", "metrics": "--metrics", "histogram_plot": "--histogram-plot",
           "position_plot": "--position-plot"}


@click.command("benchmark")
@path_option("--model", "target_model", "Reads: the target.")
@path_option("--info", "target_info", "Reads: its dtype and end-of-sequence ids.")
@path_option("--drafter", "drafter", "Reads: the trained drafter, or a published one (config.json + model.safetensors).")
@path_option("--eval", "mix_eval", "Reads: the held-out benchmark prompts.")
@path_option("--results", "bench_results", "Writes: one row per request and method (tokens, steps, acceptance).")
@path_option("--metrics", "benchmark_metrics", "Writes: tau, tokens/s and speedup per eval source and method.")
@path_option("--histogram-plot", "acceptance_plot", "Writes: share of verify steps per tokens produced (a dvc plot).")
@path_option("--position-plot", "acceptance_position_plot", "Writes: acceptance per drafted position (a dvc plot).")
@click.option("--out-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Writes: results.parquet, metrics.json, acceptance.tsv and acceptance_by_position.tsv here, "
                   "instead of the four options above: for a drafter this pipeline did not "
                   "train (z-lab's published ones).")
@click.pass_obj
def command(settings, model, info, drafter, eval, results, metrics, histogram_plot, position_plot, out_dir):
    """Speculative decoding vs the target alone and baselines.

    Params: `benchmark`, `chat`. The held-out prompts decoded by the target alone, with the drafter
    and with baselines; any greedy output that differs from the target's fails the stage.

    \b
    A published drafter on the same target and prompts, beside ours:
      draftline benchmark --drafter published/qwen3-8b-b16 --out-dir scratch/qwen3-8b-b16
    A drafter made for another target (layers, hidden size, vocabulary, mask token) is refused
    before anything loads; metrics.json names the drafter (folder, weights' sha256)."""
    ctx = click.get_current_context()
    given = [flag for name, flag in OUTPUTS.items() if ctx.get_parameter_source(name) != ParameterSource.DEFAULT]
    out = BenchmarkFiles(results, metrics, histogram_plot, position_plot)
    run_stage(settings, PARAMS.load, lambda params: run(params, model, info, drafter, eval,
                                                        _outputs(out, drafter, out_dir, given),
                                                        compute_device(settings.device), settings.target_device_map))


def _outputs(out: BenchmarkFiles, drafter: Path, out_dir: Path | None, given: list[str]) -> BenchmarkFiles:
    """Where this run writes. A drafter other than the pipeline's never writes over the
    pipeline's outputs."""
    if out_dir is not None:
        if given:
            raise ValueError(f"--out-dir replaces {given[0]}: give one or the other")
        return BenchmarkFiles.under(out_dir)
    try:
        own = paths.declared("drafter")
    except paths.PathsError:  # no dvc.yaml here: every path was given, no pipeline's drafter
        own = None
    if own is not None and drafter.resolve() == own.resolve():
        return out
    defaulted = [flag for flag in OUTPUTS.values() if flag not in given]
    if defaulted:
        raise ValueError(f"--drafter {drafter}: not the pipeline's drafter ({own}), so its {defaulted[0]} would "
                         "overwrite the pipeline's: give --out-dir DIR")
    return out
