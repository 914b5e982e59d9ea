"""`draftline preset`: a YAML overlay of params.yaml, turned into `dvc exp run -S` flags.

    draftline preset presets/large.yaml   # prints -S key=value ... for dvc exp run (make preset)

Running a preset as a DVC experiment keeps params.yaml untouched, records every override
in `dvc exp show`, and reruns only the stages whose keys the preset changes. The overlay
is validated against the full params model before anything runs.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click
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


@click.command("preset")
@click.argument("preset", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_obj
def command(settings, preset):
    """Print `dvc exp run -S` flags for a params overlay.

    The overlay is validated against the whole params model first."""
    try:
        click.echo(" ".join(flags(preset, settings.params)))
    except (ParamsError, OSError) as err:
        raise click.ClickException(str(err)) from None
