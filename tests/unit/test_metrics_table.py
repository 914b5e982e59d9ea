"""`make metrics`, `make diff` and `make exps` (draftline metrics): the headline numbers in
a table that fits 100 columns, two commits compared without the workspace, and experiments
with only the params that differ, in real git and DVC repositories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from draftline.experiments_table import experiments_headline
from draftline.metrics_table import HEADLINE, WORKSPACE, aligned, table

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1",
       "PATH": f"{Path(sys.prefix) / 'bin'}:{os.environ['PATH']}"}


def _sh(cmd: str, cwd: Path) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=ENV, shell=True, capture_output=True, text=True)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


def _project(tmp_path: Path) -> Path:
    """dvc.yaml (its paths) and the committed metrics of this repository."""
    (tmp_path / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text())
    for f in (ROOT / "data/metrics").glob("*.json"):
        (tmp_path / "data/metrics").mkdir(parents=True, exist_ok=True)
        (tmp_path / "data/metrics" / f.name).write_text(f.read_text())
    _sh("git init -q && git add -A && git commit -qm one", tmp_path)
    return tmp_path


def test_two_commits_side_by_side_with_the_change_in_100_columns(tmp_path):
    root = _project(tmp_path)
    bench = json.loads((root / "data/metrics/benchmark.json").read_text())
    bench["tau"] += 0.25
    bench["greedy"]["mtbench"]["dflash"]["tau"] = None  # a key gone: shown as "-", no change
    (root / "data/metrics/benchmark.json").write_text(json.dumps(bench))
    _sh("git commit -qam two", root)
    (root / "data/metrics/benchmark.json").write_text(json.dumps({**bench, "tau": 9.0}))  # workspace only

    lines = table(["HEAD~1", "HEAD"], root)
    assert max(map(len, lines)) <= 100 and len(lines) == len(HEADLINE) + 3
    rows = {line[:24].strip(): line[24:].split() for line in lines[2:-1]}
    before = json.loads(subprocess.run(["git", "show", "HEAD~1:data/metrics/benchmark.json"], cwd=root,
                                       capture_output=True, text=True).stdout)["tau"]
    assert rows["tau, all benchmarks"] == [f"{before:.3f}", f"{before + 0.25:.3f}", "+0.250"]
    assert rows["tau, MT-Bench"][1] == "-" and len(rows["tau, MT-Bench"]) == 2
    assert rows["answers"][-1] == "="
    # the workspace only when asked
    assert f"{9.0:.3f}" in " ".join(table(["HEAD", WORKSPACE], root))
    assert f"{9.0:.3f}" not in " ".join(lines)


def test_experiments_show_the_params_that_differ_and_the_headline_metrics(tmp_path):
    (tmp_path / "params.yaml").write_text("train: {lr: 0.5, seed: 1}\ndrafter: {num_layers: 2}\n")
    (tmp_path / "bench.py").write_text(
        "import json, os, yaml\np = yaml.safe_load(open('params.yaml'))['train']\nos.makedirs('m', exist_ok=True)\n"
        "json.dump({'tau': 1 + p['lr'], 'device': 'cpu', 'rows': 3, 'drafter': {'folder': 'd'}}, "
        "open('m/benchmark.json', 'w'))\n")
    (tmp_path / "dvc.yaml").write_text(
        "vars:\n  - paths: {benchmark_metrics: m/benchmark.json}\nstages:\n  benchmark:\n"
        "    cmd: python bench.py\n    deps: [bench.py]\n    params: [train.lr, train.seed, drafter.num_layers]\n"
        "    metrics: [m/benchmark.json: {cache: false}]\n")
    _sh("git init -q -b main && dvc init -q && dvc repro -q && git add -A && git commit -qm base", tmp_path)
    _sh("dvc exp run -q -n faster -S train.lr=0.25", tmp_path)
    # a dep changed since (its hash differs between the rows, as after `dvc commit`)
    (tmp_path / "bench.py").write_text((tmp_path / "bench.py").read_text() + "# a comment\n")
    _sh("dvc commit -f -q", tmp_path)
    lines = aligned(experiments_headline(tmp_path))
    # one column per run (the workspace holds the last experiment's result), a row per param that differs
    assert lines[0].split() == ["param", "/", "metric", "workspace", "main", "faster"], lines
    rows = {line[:19].strip(): line[19:].split() for line in lines[2:-1]}
    assert rows == {"train.lr": ["0.25", "0.5", "0.25"], "tau, all benchmarks": ["1.250", "1.500", "1.250"]}, lines
    assert lines[-1] == "benchmark device: cpu" and max(map(len, lines)) <= 100
