"""Stage `target`: materialise the target model and record what later stages need.

    draftline target --model DIR --info FILE
"""

from __future__ import annotations

import click

from draftline.command import path_option, run_stage
from draftline.config.drafter import DrafterParams
from draftline.config.target import TargetParams
from draftline.config.view import Declared
from draftline.target.prepare import prepare

PARAMS = Declared("target", ("target", "drafter.num_layers", "drafter.target_layer_ids"),
                  (TargetParams, DrafterParams))


@click.command("target")
@path_option("--model", "target_model", "Writes: the target as a plain HF folder (or a pointer to it).")
@path_option("--info", "target_info", "Writes: JSON with its layer count, hidden size, end-of-sequence ids and "
                                      "the layers the drafter reads.")
@click.pass_obj
def command(settings, model, info):
    """Materialise the target model; record its layers and stop ids.

    Params: `target`, `drafter.num_layers`, `drafter.target_layer_ids`."""
    run_stage(settings, PARAMS.load, lambda params: prepare(params, model, info))
