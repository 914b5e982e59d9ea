"""Stage `benchmark`: speculative decoding with the drafter vs the target alone and baselines.

    draftline benchmark --model DIR --info FILE --drafter DIR --eval FILE --results FILE --metrics FILE ...

Ends by writing the drafter's model card beside its weights.
"""

from __future__ import annotations

import click

from draftline.command import path_option, run_stage
from draftline.config.benchmark import BenchmarkParams
from draftline.config.chat import ChatParams
from draftline.config.view import Declared
from draftline.decode.benchmark import BenchmarkFiles, run
from draftline.devices import compute_device

PARAMS = Declared("benchmark", ("chat", "benchmark"), (ChatParams, BenchmarkParams))


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
    out = BenchmarkFiles(results, metrics, histogram_plot, position_plot, card)
    run_stage(settings, PARAMS.load, lambda params: run(params, model, info, drafter, eval, out,
                                                        compute_device(settings.device), settings.target_device_map))
