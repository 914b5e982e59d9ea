"""Stage `mix`: exact and near-duplicate removal, decontamination, mix by category, split.

    draftline mix --prompts FILE --train FILE --eval FILE --metrics FILE --plot FILE
"""

from __future__ import annotations

import click

from draftline.command import path_option, run_stage
from draftline.config.mix import MixParams
from draftline.config.view import Declared
from draftline.prompts.mix import run

PARAMS = Declared("mix", ("mix",), (MixParams,))


@click.command("mix")
@path_option("--prompts", "prompts", "Reads: the downloaded prompts.")
@path_option("--train", "mix_train", "Writes: the mixed training prompts, each with split train or val.")
@path_option("--eval", "mix_eval", "Writes: the held-out benchmark prompts.")
@path_option("--metrics", "mix_metrics", "Writes: counts removed and kept, by source and category; time, rows/s, "
                                         "peak memory.")
@path_option("--plot", "mix_plot", "Writes: prompts per category before and after, a column each (a dvc plot).")
@click.pass_obj
def command(settings, prompts, train, eval, metrics, plot):
    """Dedupe, decontaminate, weight by category, split.

    Params: `mix`. Byte-identical outputs for the same inputs and params."""
    run_stage(settings, PARAMS.load, lambda params: run(params, prompts, train, eval, metrics, plot), torch_threads=False)
