"""Stage `download`: read every prompt source in params into one Parquet file.

    draftline download --out FILE --metrics FILE

Local sources must lie inside one of the stage's data deps in dvc.yaml (`--inputs`
defaults to them): editing a prompt file then reruns the stage, and a file outside them
stops it here, named, instead of going stale unnoticed.
"""

from __future__ import annotations

from pathlib import Path

import click

from draftline import paths
from draftline.command import path_option, run_stage
from draftline.config.download import DownloadParams
from draftline.config.view import Declared
from draftline.prompts.download import run

PARAMS = Declared("download", ("download",), (DownloadParams,))


@click.command("download")
@click.option("--inputs", type=click.Path(path_type=Path), multiple=True,
              default=lambda: paths.stage_data_deps("download"), show_default="download's deps in dvc.yaml",
              help="Reads: local prompt files or folders (repeatable); every local source in params must lie inside "
                   "one. Hub and benchmark sources need none.")
@path_option("--out", "prompts", "Writes: every prompt in one schema (id, source, category, role, messages).")
@path_option("--metrics", "download_metrics", "Writes: rows read, kept and skipped per source, with examples.")
@click.pass_obj
def command(settings, inputs, out, metrics):
    """Read every prompt source into one Parquet file.

    Params: `download`. Malformed rows are counted and skipped, named by source and row."""
    run_stage(settings, PARAMS.load, lambda params: run(params, list(inputs), out, metrics), torch_threads=False)
