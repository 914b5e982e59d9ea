"""Stage `check`: validate the whole params.yaml on every change to it.

    draftline check

A stage validates only the sections it reads, and runs only when one of its own keys
changes: a misspelt key (`drafter.block_sise`, a top-level `trian:`) that no stage reads
would otherwise pass unnoticed. This stage tracks the whole file (dvc.yaml `params: -
params.yaml:`), so any edit reruns it and `dvc repro` stops here, with the key named,
before any other stage. Nothing depends on it: a valid edit reruns only the stages whose
keys changed.
"""

from __future__ import annotations

import click

from draftline.check import count_settings
from draftline.command import run_stage
from draftline.config.params import load_params

# Every key: dvc.yaml tracks the whole file (`params: - params.yaml:`).
PARAMS = "params.yaml"


@click.command("check")
@click.pass_obj
def command(settings):
    """Validate every key of params.yaml (reruns on any edit to it).

    Params: every key. Reads: the params file (--params). Writes: nothing. Fails on an
    unknown or misspelt key, a wrong type or a value out of range, naming the key."""
    run_stage(settings, load_params,
              lambda params: print(f"check: {settings.params}: {count_settings(params)} settings valid"),
              torch_threads=False)
