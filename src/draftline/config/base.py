"""What every section shares: strict validation, the number types, and errors that name the key."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

PositiveInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class ParamsError(ValueError):
    """params.yaml is malformed; the message names the key."""


class Section(BaseModel):
    # Unknown keys are errors: a misspelt key silently falling back to a default is the
    # classic "which setting produced this drafter" bug.
    # Strict: YAML already gives every value its type, so "4" for an int, `true` for an
    # int or "off" for a bool is a mistake to report, not to coerce; and a non-finite
    # float (`.inf`, `.nan`) is never a setting (lr: .inf trains an all-NaN drafter).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


BatchDtype = Literal["auto", "float32", "bfloat16", "float16"]


def check_master(nodes: int, master: str | None) -> None:
    """A section that starts torchrun over several nodes (extract, train; launch.py): they
    meet at node 0, so its host:port is needed."""
    if nodes > 1 and not re.fullmatch(r"[^\s:]+:\d{1,5}", master or ""):
        raise ValueError(f"master: {master!r}; with nodes: {nodes} it must be node 0's host:port")


def format_error(err: ValidationError, source: str, prefix: str = "") -> str:
    """One line per bad key, the key spelt as in params.yaml (`train.lr`)."""
    lines = []
    for e in err.errors():
        key = ".".join([prefix] * bool(prefix) + [str(p) for p in e["loc"]]) or "<root>"
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: unknown key '{key}'")
        else:
            lines.append(f"{source}: {key}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


class ParamsLoader(yaml.SafeLoader):
    """YAML as DVC reads params (YAML 1.2): `3e-4` and `1e6` are floats. PyYAML's YAML 1.1
    wants a dot (`3.0e-4`) and reads them as text, so `lr: 3e-4` written by hand would
    fail as "not a number" here while `dvc exp run -S train.lr=3e-4` gives a float."""


# Appended after PyYAML's own resolvers: ints and dotted floats resolve as before; only an
# exponent without a dot, which YAML 1.1 leaves as text, becomes a float.
_EXPONENT = re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$")
ParamsLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT, list("-+0123456789"))


def load_yaml(text: str):
    """A params or preset file's text, parsed as DVC parses it."""
    return yaml.load(text, Loader=ParamsLoader)  # noqa: S506 (a SafeLoader)


def read_params_file(path: str | Path) -> dict:
    """params.yaml as a mapping; a missing file, bad YAML or another top level named."""
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: file not found")
    with path.open() as f:
        try:
            data = load_yaml(f.read())
        except yaml.YAMLError as err:
            raise ParamsError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping")
    return data
