"""Stage `check`: validate the whole params.yaml on every change to it.

    draftline check

Every stage validates the whole file before it works, but a stage runs only when one of
its own keys changes: a misspelt key (`drafter.block_sise`, a top-level `trian:`) that no
stage reads would otherwise pass unnoticed once the pipeline has run. This stage tracks
the whole file (dvc.yaml `params: - params.yaml:`), so any edit reruns it and `dvc repro`
stops here, with the key named, before any other stage. Nothing depends on it: a valid
edit reruns only the stages whose keys changed.
"""

from __future__ import annotations

import click

from .command import run_stage


def _count(section) -> int:
    return sum(_count(v) if hasattr(type(v), "model_fields") else 1
               for v in (getattr(section, k) for k in type(section).model_fields))


@click.command("check")
@click.pass_obj
def command(settings):
    """Validate every key of params.yaml (reruns on any edit to it).

    Params: every key. Reads: the params file (--params). Writes: nothing. Fails on an
    unknown or misspelt key, a wrong type or a value out of range, naming the key."""
    run_stage(settings, lambda params: print(f"check: {settings.params}: {_count(params)} settings valid"),
              torch_threads=False)
