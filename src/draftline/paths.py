"""The pipeline's paths, declared once: `vars: - paths: {...}` at the top of dvc.yaml.

dvc.yaml hands every stage its inputs and outputs as options (`--tokens ${paths.tokens}`).
A command run by hand (`draftline tokenize`, `draftline inspect`) and the benchmarks under
bench/ read the same declaration for their defaults, so no stage path is spelled in Python.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import yaml

DVC_FILE = Path("dvc.yaml")


class PathsError(ValueError):
    pass


@lru_cache(maxsize=None)
def _load(dvc_file: Path) -> dict:
    if not dvc_file.exists():
        raise PathsError(f"{dvc_file}: not found (run from the repository root, or pass the path option)")
    return yaml.safe_load(dvc_file.read_text()) or {}


def _read(dvc_file: Path) -> dict[str, str]:
    data = _load(dvc_file)
    for entry in data.get("vars") or []:
        if isinstance(entry, dict) and isinstance(entry.get("paths"), dict):
            return {str(k): str(v) for k, v in entry["paths"].items()}
    raise PathsError(f"{dvc_file}: no `vars: - paths: {{...}}` declaration")


def declared(name: str, dvc_file: Path = DVC_FILE) -> Path:
    """The path dvc.yaml declares as `paths.<name>`."""
    paths = _read(dvc_file.resolve())
    if name not in paths:
        raise PathsError(f"{dvc_file}: vars paths has no '{name}'")
    return Path(paths[name])


def all_declared(dvc_file: Path = DVC_FILE) -> dict[str, Path]:
    return {k: Path(v) for k, v in _read(dvc_file.resolve()).items()}


def stage_data_deps(stage: str, dvc_file: Path = DVC_FILE) -> list[Path]:
    """A stage's deps in dvc.yaml other than its code (src/, stages/), `${paths.x}` resolved: the
    data whose edits rerun it."""
    paths = _read(dvc_file.resolve())
    deps = ((_load(dvc_file.resolve()).get("stages") or {}).get(stage) or {}).get("deps") or []
    resolved = [re.sub(r"\$\{paths\.(\w+)\}", lambda m: paths.get(m[1], m[0]), str(d)) for d in deps]
    return [Path(d) for d in resolved if not d.startswith(("src/", "stages/"))]
