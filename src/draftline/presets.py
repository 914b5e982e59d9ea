"""`draftline preset`: a YAML overlay of params.yaml, turned into `dvc exp run -S` flags.

    draftline preset presets/large.yaml   # prints -S key=value ... for dvc exp run (make preset)
    make preset PRESET=smoke              # the whole pipeline in minutes (tests/pipeline runs it too)

Running a preset as a DVC experiment records every override in `dvc exp show` and reruns
only the stages whose keys the preset changes; dvc leaves the experiment's params.yaml in
the workspace. The overlay is validated against the full params model before anything runs.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from .config.base import ParamsError, load_yaml

from .config.params import parse_params


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


def _override(v: object) -> str:
    """A value in the override grammar `dvc exp run -S` parses (Hydra's): JSON, but with
    bare mapping keys, which Hydra requires (`[{name: "seed"}]`, not `[{"name": "seed"}]`)."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_override(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_override(x) for x in v) + "]"
    return json.dumps(v)


def _overlay(preset: Path) -> dict:
    over = load_yaml(preset.read_text()) or {}
    if not isinstance(over, dict):
        raise ParamsError(f"{preset}: top level must be a mapping")
    return over


def merged(preset: Path, params: Path = Path("params.yaml")) -> dict:
    """params.yaml with the overlay merged key by key, as `dvc exp run -S` applies it (a
    list is replaced whole); validated against the whole params model (ParamsError)."""
    full = _merge(load_yaml(params.read_text()), _overlay(preset))
    parse_params(full, f"{params} + {preset}")
    return full


def flags(preset: Path, params: Path = Path("params.yaml")) -> list[str]:
    merged(preset, params)
    return [f"-S {shlex.quote(f'{k}={_override(v)}')}" for k, v in _flatten(_overlay(preset))]


def known(folder: Path) -> list[str]:
    """The presets a folder holds, by the name `make preset PRESET=...` takes."""
    return sorted(p.stem for p in folder.glob("*.yaml"))


@click.command("preset")
@click.argument("preset", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_obj
def command(settings, preset):
    """Print `dvc exp run -S` flags for a params overlay.

    The overlay is validated against the whole params model first."""
    if not preset.is_file():
        names = known(preset.parent)
        raise click.ClickException(f"{preset}: no such preset; {preset.parent}/ has "
                                   + (", ".join(names) if names else "none"))
    try:
        click.echo(" ".join(flags(preset, settings.params)))
    except (ParamsError, OSError) as err:
        raise click.ClickException(str(err)) from None
