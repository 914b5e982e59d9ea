"""`draftline`: one command, a subcommand per pipeline stage plus the tools around it.

    draftline --help                 # the stages in pipeline order, then the tools
    draftline tokenize --help        # what a stage reads and writes
    draftline --device cpu train     # global options go before the subcommand

dvc.yaml runs the stage subcommands with every path given as an option (declared once
under `vars: paths`). A stage's command lives in stages/<stage>.py; this is the one module
of the library that imports them. Subcommands are imported when called, never all at once:
a stage then loads only its own code, and its import closure is exactly what dvc.yaml lists.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from .command import Settings, show_click_error

# name -> module defining `command`; the pipeline's order, as dvc.yaml runs it.
STAGES = {name: f"stages.{name}" for name in (
    "check", "target", "download", "mix", "regenerate", "tokenize", "extract", "train", "benchmark", "card")}
TOOLS = {
    "doctor": "draftline.doctor.command",
    "inspect": "draftline.sequences.inspect",
    "preset": "draftline.presets",
    "results": "draftline.results",
    "metrics": "draftline.metrics_table",
    "plots": "draftline.plots_page",
}


class StageGroup(click.Group):
    """Lazily imported subcommands, listed stages first in pipeline order."""

    def list_commands(self, ctx):
        return [*STAGES, *TOOLS]

    def get_command(self, ctx, name):
        module = STAGES.get(name) or TOOLS.get(name)
        if module is None:
            return super().get_command(ctx, name)
        return importlib.import_module(module).command

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """As click's, but its errors print as every stage's do: one `error: ...` line."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as err:
            show_click_error(err)
            sys.exit(err.exit_code)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def format_commands(self, ctx, formatter):
        for title, names in (("Pipeline stages (dvc.yaml order)", STAGES), ("Tools", TOOLS)):
            rows = [(n, self.get_command(ctx, n).get_short_help_str(limit=64)) for n in names]
            with formatter.section(title):
                formatter.write_dl(rows)


@click.group(cls=StageGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--params", type=click.Path(dir_okay=False), default="params.yaml", show_default=True,
              envvar="DRAFTLINE_PARAMS", show_envvar=True, help="Params file every stage validates whole.")
@click.option("--threads", type=click.IntRange(min=1), envvar="DRAFTLINE_THREADS", show_envvar=True,
              help="CPU threads for torch.  [default: all cores]")
@click.option("--device", envvar="DRAFTLINE_DEVICE", show_envvar=True,
              help="cpu, cuda or cuda:N for every model stage.  [default: this process's GPU (LOCAL_RANK) "
                   "when CUDA has one, else the CPU]")
@click.option("--target-device-map", type=click.Choice(["auto"]), envvar="DRAFTLINE_TARGET_DEVICE_MAP",
              show_envvar=True, help="auto: spread the target over every GPU this process sees (accelerate), "
                                     "for a target larger than one device.  [default: one device]")
@click.option("--no-progress", is_flag=True, envvar="DRAFTLINE_NO_PROGRESS", show_envvar=True,
              help="No progress bars.")
@click.option("--debug", is_flag=True, envvar="DRAFTLINE_DEBUG", show_envvar=True,
              help="Full traceback instead of the one-line error.")
@click.version_option(package_name="draftline")
@click.pass_context
def main(ctx, params, threads, device, target_device_map, no_progress, debug):
    """Train a DFlash drafter for a target LLM: a DVC pipeline of the stages below.

    `make all` (or `dvc repro`) runs them in order; each reads its keys of params.yaml and
    the paths dvc.yaml gives it.
    """
    ctx.obj = Settings(Path(params), threads, device, target_device_map, not no_progress, debug)


if __name__ == "__main__":
    main()
