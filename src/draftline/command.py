"""What every `draftline` command shares: the global options, path options that default to
dvc.yaml's declaration, and the stage runner (params loaded first, one-line errors).

A stage module (stages/) defines its click command with `path_option`s and calls
`run_stage` with the loader of its params; the group in cli.py finds it by name. Nothing
here imports a stage or a params section, so a stage's import closure (its dvc.yaml deps)
is its own code plus this module and the config of the sections it reads.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import click

from . import paths, progress, secrets
from .config.base import ParamsError


@dataclass(frozen=True)
class Settings:
    """The group's options: how to run, never what to compute (those are params)."""

    params: Path = Path("params.yaml")
    threads: int | None = None
    device: str | None = None
    target_device_map: str | None = None
    progress: bool = True
    debug: bool = False


def path_option(flag: str, declared: str, help: str, multiple: bool = False):
    """`--flag PATH`, defaulting to `paths.<declared>` in dvc.yaml (repeatable: `multiple`)."""
    default = (lambda: [paths.declared(declared)]) if multiple else (lambda: paths.declared(declared))
    return click.option(flag, type=click.Path(path_type=Path), help=help, multiple=multiple, default=default,
                        show_default=f"paths.{declared} in dvc.yaml")


class Interrupted(Exception):
    """Ctrl-C or SIGTERM (a scheduler, `kill`)."""


def _terminate(signum, frame):
    # SIGTERM unwinds like Ctrl-C: finally blocks stop launched servers and remove temp
    # files; finished shards and checkpoints stay for the rerun.
    raise Interrupted(signal.Signals(signum).name, 128 + signum)


KEPT = ("finished work is kept (answer shards, hidden-state shards, checkpoints) and temp files are "
        "removed: rerun the stage (dvc repro) to resume")


def _one_line(err: BaseException) -> tuple[str, int]:
    """The line a user sees for an expected failure, and the exit code."""
    if isinstance(err, Interrupted):
        return f"interrupted ({err.args[0]}): {KEPT}", err.args[1]
    if isinstance(err, KeyboardInterrupt):
        return f"interrupted (Ctrl-C): {KEPT}", 130
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        where = f" writing {err.filename}" if err.filename else ""
        return f"disk full{where}: {KEPT}, once space is freed", 2
    return f"{err}", 2


def show_click_error(err: click.ClickException) -> None:
    """A click error (a bad option, a tool's refusal) in the stages' style: `error: ...`,
    after the usage line and help hint click gives for a usage error."""
    if isinstance(err, click.UsageError) and err.ctx is not None:
        click.echo(f"{err.ctx.get_usage()}\nTry '{err.ctx.command_path} --help' for help.", err=True)
    click.echo(f"error: {secrets.mask(err.format_message())}", err=True)


def run_stage(settings: Settings, load: Callable[[Path], Any], stage: Callable[[Any], None],
              torch_threads: bool = True) -> None:
    """Load params with `load` (a stage's `PARAMS.load`: its declared keys, validated), set
    threads and progress, run `stage(params)`. Expected failures
    (bad params, a missing input, an unreachable server, Ctrl-C, a full disk) print one
    line naming the key, file or URL, with secrets masked, and exit non-zero; nothing is
    half-written (every write is atomic). `--debug` shows the traceback instead."""
    signal.signal(signal.SIGTERM, _terminate)
    progress.configure(settings.progress)
    try:
        params = load(settings.params)
        if torch_threads:
            import torch  # here, not at import: `draftline --help` stays fast

            torch.set_num_threads(settings.threads or max(1, os.cpu_count() or 1))
            # Every stage starts from the same global RNG state; the seeds that matter are params.
            torch.manual_seed(0)
        stage(params)
    except (ParamsError, paths.PathsError, OSError, ValueError, RuntimeError, KeyboardInterrupt,
            Interrupted) as err:
        if settings.debug:
            raise
        line, code = _one_line(err)
        print(f"error: {secrets.mask(line)}", file=sys.stderr)
        sys.exit(code)
