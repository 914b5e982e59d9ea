"""`make exps` (`draftline metrics --experiments`): the experiments side by side, one column
each, with the params that differ between them and the headline metrics as rows.

`dvc exp show` puts every param and metric in a column of its own: 255 columns on the
default, or, with `--only-changed` and `--keep`, one more column per changed param, past 100
columns with the first one. Turned on its side, the table grows by a row per changed param
and by a column (about 10 characters) per experiment, so a handful of runs reads in 100
columns, piped or not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from . import paths
from .metrics_table import HEADLINE, WORKSPACE, Headline, formatted, value

WIDEST = 16  # a param value longer than this (a list of sources) is cut, with "…"


@dataclass(frozen=True)
class Column:
    name: str  # `workspace`, the baseline's branch or short sha, the experiment's name
    params: dict[str, object]  # params.yaml, flattened to dotted keys
    metrics: dict[str, dict | None]  # stage -> its metrics file


def _flat(data: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, val in data.items():
        if isinstance(val, dict) and val:
            out |= _flat(val, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = val
    return out


def _column(name: str, data: dict, files: dict[str, str]) -> Column:
    params = ((data.get("params") or {}).get("params.yaml") or {}).get("data") or {}
    metrics = data.get("metrics") or {}
    return Column(name, _flat(params), {stage: (metrics.get(path) or {}).get("data") for stage, path in files.items()})


def columns(shown: list[dict], files: dict[str, str]) -> list[Column]:
    """The workspace, each baseline commit and the experiments on it, as `dvc exp show --json`
    lists them (an experiment's first rev is its result)."""
    out = []
    for entry in shown:
        rev = entry.get("rev") or ""
        out.append(_column(entry.get("name") or (rev if rev == WORKSPACE else rev[:7]), entry.get("data") or {}, files))
        for exp in entry.get("experiments") or []:
            first = (exp.get("revs") or [{}])[0]
            out.append(_column(exp.get("name") or str(first.get("rev", ""))[:7], first.get("data") or {}, files))
    return out


def _param(val: object) -> str:
    text = val if isinstance(val, str) else json.dumps(val)
    return text if len(text) <= WIDEST else text[:WIDEST - 1] + "…"


def changed(cols: list[Column]) -> list[str]:
    """The params whose values are not the same in every column."""
    keys = sorted({k for c in cols for k in c.params})
    return [k for k in keys if len({json.dumps(c.params.get(k, "-"), sort_keys=True) for c in cols}) > 1]


def headline_of(cols: list[Column]) -> Headline:
    rows = [[k, *(_param(c.params[k]) if k in c.params else "-" for c in cols)] for k in changed(cols)]
    for r in HEADLINE:
        vals = [value(c.metrics.get(r.stage), r.key) for c in cols]
        if any(v is not None for v in vals):
            rows.append([r.label, *(formatted(v, r.digits) for v in vals)])
    devices = {c.name: str((c.metrics.get("benchmark") or {}).get("device")) for c in cols
               if (c.metrics.get("benchmark") or {}).get("device")}
    return Headline(["param / metric", *(c.name for c in cols)], rows, devices)


def metrics_files(root: Path) -> dict[str, str]:
    """The stages' metrics files dvc.yaml declares, by stage."""
    files = {}
    for stage in {r.stage for r in HEADLINE}:
        try:
            files[stage] = paths.declared(f"{stage}_metrics", root / "dvc.yaml").as_posix()
        except paths.PathsError:  # a project that declares fewer stages
            continue
    return files


def experiments_headline(root: Path = Path(".")) -> Headline:
    done = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"], cwd=root, capture_output=True,
                          text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise click.ClickException(f"dvc exp show failed: {last}")
    return headline_of(columns(json.loads(done.stdout), metrics_files(root)))
