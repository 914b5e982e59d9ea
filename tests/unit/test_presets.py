"""Presets (presets/*.yaml): each makes a valid params.yaml, and `make preset` writes it.

The smoke preset is also what tests/pipeline runs, so the users' smoke run and the tests'
cannot drift apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from draftline.config.params import load_params
from draftline.presets import merged

PRESETS = sorted(p.stem for p in (ROOT / "presets").glob("*.yaml"))


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_merged_with_params_is_a_valid_params_file(name, tmp_path):
    out = tmp_path / "params.yaml"
    out.write_text(yaml.safe_dump(merged(ROOT / "presets" / f"{name}.yaml", ROOT / "params.yaml")))
    load_params(out)


def test_make_preset_smoke_writes_the_merged_params_yaml(tmp_path):
    """The Makefile's own recipe in a scratch git+dvc repo; one trivial stage stands in for
    the pipeline (the pipeline tier runs the real stages on these params)."""
    (tmp_path / "presets").mkdir()
    for f in ("params.yaml", "presets/smoke.yaml"):
        (tmp_path / f).write_text((ROOT / f).read_text())
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: echo ok\n    params: [train.lr]\n")
    venv = Path(sys.prefix)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")

    def run(cmd):
        p = subprocess.run(cmd, cwd=tmp_path, env=env, shell=True, capture_output=True, text=True)
        assert p.returncode == 0, f"{cmd}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"

    run("git init -q && dvc init -q && git add -A && git commit -qm init")
    # -o: the venv this test runs in is taken as installed, never rebuilt here
    run(f"make -s -f {ROOT / 'Makefile'} VENV={venv} -o {venv}/.installed preset PRESET=smoke")

    params = load_params(tmp_path / "params.yaml")
    assert params.download.sources[0].max_rows == 10 and params.drafter.num_layers == 1
    assert yaml.safe_load((tmp_path / "params.yaml").read_text()) == merged(
        tmp_path / "presets/smoke.yaml", ROOT / "params.yaml")
