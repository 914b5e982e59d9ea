"""Commands for the pipeline tests, run as a user runs them: git and dvc from this venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_command(cmd, cwd, check=True) -> subprocess.CompletedProcess:
    """`cmd` (a shell string or an argv list) in `cwd`, with this venv's dvc on PATH and a git
    identity; raises with the output's tail when it fails and `check` is set."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", DVC_NO_ANALYTICS="1",
               DRAFTLINE_NO_PROGRESS="1", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, shell=isinstance(cmd, str))
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def copy_code(root: Path, repo: Path) -> str:
    """The code under test into a temporary repository: the library (src/) and the stage
    modules (stages/), which dvc.yaml lists as deps. Returns the PYTHONPATH under which the
    stages import that copy rather than the installed checkout."""
    import shutil

    for d in ("src", "stages"):
        shutil.copytree(root / d, repo / d, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return f"{repo / 'src'}:{repo}"
