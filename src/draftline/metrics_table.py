"""`draftline metrics`: the numbers people compare, one table that fits 100 columns.

    draftline metrics                          # the workspace's metrics
    draftline metrics --rev HEAD~1 --rev HEAD  # two commits, and the change
    draftline metrics --rev HEAD --rev workspace
    draftline metrics --experiments            # one column per experiment: the params that
                                               # differ, the headline metrics

`dvc metrics show` and `dvc metrics diff` print every key of every stage (255 columns on
the default); this prints the headline ones, read from the files dvc.yaml declares, at a
git revision (`git show REV:path`) or in the workspace.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import click

from . import paths

WORKSPACE = "workspace"


@dataclass(frozen=True)
class Row:
    label: str
    stage: str  # whose metrics file (dvc.yaml's `<stage>_metrics`)
    key: str  # dotted path inside it
    digits: int  # decimals shown; 0: a count


HEADLINE = (
    Row("tau, all benchmarks", "benchmark", "tau", 3),
    Row("tau, HumanEval", "benchmark", "greedy.humaneval.dflash.tau", 3),
    Row("tau, MT-Bench", "benchmark", "greedy.mtbench.dflash.tau", 3),
    Row("speedup, all", "benchmark", "speedup", 2),
    Row("prompt lookup tau, all", "benchmark", "greedy.all.prompt_lookup.tau", 3),
    Row("greedy mismatches", "benchmark", "mismatches", 0),
    Row("train loss", "train", "train_loss", 3),
    Row("held-out tau estimate", "train", "val_tau_estimate", 3),
    Row("held-out CE", "train", "val_ce", 3),
    Row("train steps", "train", "steps", 0),
    Row("train steps/s", "train", "steps_per_second", 2),
    Row("train prompts (mix)", "mix", "train_after", 0),
    Row("answers", "regenerate", "rows_answered", 0),
    Row("answer tokens", "regenerate", "completion_tokens", 0),
    Row("sequences", "tokenize", "rows", 0),
    Row("supervised tokens", "tokenize", "supervised_tokens", 0),
    Row("extracted tokens/s", "extract", "tokens_per_second", 0),
    Row("hidden states, GB", "extract", "gb_written", 3),
)


def read_metrics(stage: str, rev: str, root: Path = Path(".")) -> dict | None:
    """A stage's metrics at `rev` (a git revision, or the workspace); None where absent."""
    path = paths.declared(f"{stage}_metrics", root / "dvc.yaml")  # relative to the root
    if rev == WORKSPACE:
        file = root / path
        return json.loads(file.read_text()) if file.is_file() else None
    shown = subprocess.run(["git", "show", f"{rev}:{path.as_posix()}"], cwd=root, capture_output=True, text=True)
    return json.loads(shown.stdout) if shown.returncode == 0 else None


def value(metrics: dict | None, key: str):
    node = metrics
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def formatted(x, digits: int) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if digits == 0 else f"{x:.{digits}f}"


def _change(a, b, digits: int) -> str:
    if a is None or b is None:
        return ""
    d = round(b, digits) - round(a, digits)  # the change of the values shown
    if round(d, digits) == 0:
        return "="
    return f"{d:+,.0f}" if digits == 0 else f"{d:+.{digits}f}"


@dataclass(frozen=True)
class Headline:
    """The headline table as cells, for text (`table`) and for HTML (the plots page)."""
    header: list[str]  # metric, one column per revision (two: and their change)
    rows: list[list[str]]  # formatted values, "-" where a revision lacks the key
    devices: dict[str, str]  # the benchmark's device per revision, where its metrics name one


def headline(revs: list[str], root: Path = Path(".")) -> Headline:
    """The headline rows for one or more revisions (two: with their change)."""
    files = {(stage, rev): read_metrics(stage, rev, root) for stage in {r.stage for r in HEADLINE} for rev in revs}
    rows = []
    for r in HEADLINE:
        vals = [value(files[r.stage, rev], r.key) for rev in revs]
        cells = [r.label, *(formatted(v, r.digits) for v in vals)]
        if len(revs) == 2:
            cells.append(_change(*vals, r.digits))
        rows.append(cells)
    header = ["metric", *revs] + (["change"] if len(revs) == 2 else [])
    device = {rev: (files["benchmark", rev] or {}).get("device") for rev in revs}
    return Headline(header, rows, {rev: str(d) for rev, d in device.items() if d})


def table(revs: list[str], root: Path = Path(".")) -> list[str]:
    """The headline rows for one or two revisions (two: with their change), as aligned text."""
    return aligned(headline(revs, root))


def aligned(h: Headline) -> list[str]:
    """A Headline as text: labels left, values right, the benchmark's devices below."""
    widths = [max(len(row[i]) for row in [h.header, *h.rows]) for i in range(len(h.header))]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return [line(h.header), line(["-" * w for w in widths]), *map(line, h.rows), *_devices(h.devices)]


def _devices(devices: dict[str, str]) -> list[str]:
    """The benchmark's machine: once when every column ran on the same, else per column."""
    if not devices:
        return []
    if len(set(devices.values())) == 1:
        return [f"benchmark device: {next(iter(devices.values()))}"]
    return [f"benchmark device: {', '.join(f'{rev} {d}' for rev, d in devices.items())}"]


@click.command("metrics")
@click.option("--rev", "revs", multiple=True, help="A git revision, or `workspace`; twice: compared.  "
                                                   "[default: workspace]")
@click.option("--experiments", is_flag=True, help="The experiments (`dvc exp show`), one column each: the params "
                                                 "that differ, the headline metrics.")
def command(revs, experiments):
    """The headline metrics, one narrow table; two revisions side by side.

    Tau per benchmark, speedup, prompt lookup, train loss and rate, counts. Every metric:
    `dvc metrics show` / `dvc metrics diff A B`."""
    if experiments:
        from .experiments_table import experiments_headline

        click.echo("\n".join(aligned(experiments_headline())))
        return
    revs = list(revs) or [WORKSPACE]
    if len(revs) > 2:
        raise click.UsageError("--rev: at most two revisions")
    for rev in revs:
        if rev != WORKSPACE and subprocess.run(["git", "rev-parse", "--verify", "-q", f"{rev}^{{commit}}"],
                                               capture_output=True).returncode:
            raise click.ClickException(f"--rev {rev}: not a git revision here (or `workspace`)")
    click.echo("\n".join(table(revs)))
