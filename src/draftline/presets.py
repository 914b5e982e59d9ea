"""Params presets: a YAML overlay of params.yaml, turned into `dvc exp run -S` flags.

    python -m draftline.presets presets/large.yaml   # prints -S key=value ... for dvc exp run

Running a preset as a DVC experiment keeps params.yaml untouched, records every override
in `dvc exp show`, and reruns only the stages whose keys the preset changes. The overlay
is validated against the full params model before anything runs.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import yaml

from .config import ParamsError, parse_params


def _flatten(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.extend(_flatten(v, key + "."))
        else:
            out.append((key, v))
    return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def flags(preset: Path, params: Path = Path("params.yaml")) -> list[str]:
    over = yaml.safe_load(preset.read_text()) or {}
    if not isinstance(over, dict):
        raise ParamsError(f"{preset}: top level must be a mapping")
    parse_params(_merge(yaml.safe_load(params.read_text()), over), f"{params} + {preset}")
    return [f"-S {shlex.quote(f'{k}={json.dumps(v)}')}"  # JSON is YAML: dvc parses it back
            for k, v in _flatten(over)]


if __name__ == "__main__":
    try:
        print(" ".join(flags(Path(sys.argv[1]))))
    except (ParamsError, OSError, IndexError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
