"""A stage's params: the keys it declares, validated, and nothing else.

    PARAMS = Declared("train", ("drafter", "train", "extract.dtype"), (DrafterParams, TrainParams, ExtractParams))
    params = PARAMS.load("params.yaml")
    params.extract.dtype       # declared: the value
    params.extract.teacher     # not declared: UndeclaredKey names it

DVC reruns a stage when a key listed under its `params:` in dvc.yaml changes. A key the
stage's code reads but does not list would change its output without rerunning it; the
view makes that read fail on the first run instead (tests/unit/test_params_view.py holds
each stage's declaration equal to dvc.yaml). Only the declared sections are validated here:
the check stage validates the whole file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .base import ParamsError, Section, format_error, read_params_file


class UndeclaredKey(ParamsError):
    """A stage read a key it does not declare: its output would not follow that key."""


def covers(declared: tuple[str, ...], key: str) -> bool:
    """`key` is declared itself or lies inside a declared section (`train` covers `train.lr`)."""
    return any(key == d or key.startswith(d + ".") for d in declared)


@dataclass(frozen=True)
class Declared:
    """What one stage reads of params.yaml: `keys` as dvc.yaml lists them, and the section
    models (each with its `key`) that validate them."""

    stage: str
    keys: tuple[str, ...]
    sections: tuple[type[Section], ...]

    def __post_init__(self) -> None:
        names = {s.key for s in self.sections}
        heads = {k.split(".")[0] for k in self.keys}
        if names != heads:
            raise ValueError(f"stage {self.stage}: keys {sorted(heads)} but section models {sorted(names)}")

    def load(self, path: str | Path = "params.yaml") -> "ParamsView":
        """The declared sections of the file, validated strictly, behind the view."""
        data, values = read_params_file(path), {}
        for model in self.sections:
            raw = data.get(model.key, {})
            try:
                values[model.key] = model.model_validate({} if raw is None else raw)
            except ValidationError as err:
                raise ParamsError(format_error(err, str(path), model.key)) from None
        return ParamsView(values, self.keys, self.stage)


class ParamsView:
    """Attribute access to the declared keys; a section declared whole is handed out as
    its model, a partly declared one as another view."""

    __slots__ = ("_values", "_declared", "_stage", "_at")

    def __init__(self, values: Any, declared: tuple[str, ...], stage: str, at: str = ""):
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_declared", declared)
        object.__setattr__(self, "_stage", stage)
        object.__setattr__(self, "_at", at)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        key = f"{self._at}.{name}" if self._at else name
        inside = any(d.startswith(key + ".") for d in self._declared)
        if not (covers(self._declared, key) or inside):
            raise UndeclaredKey(f"params key '{key}' is read by stage {self._stage} but not declared: add it to "
                                f"PARAMS in stages/{self._stage}.py and to the stage's params in dvc.yaml")
        value = self._values[name] if isinstance(self._values, dict) else getattr(self._values, name)
        if covers(self._declared, key) or not isinstance(value, BaseModel):
            return value
        return ParamsView(value, self._declared, self._stage, key)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("params are read-only")

    def __repr__(self) -> str:
        return f"ParamsView({self._stage}: {', '.join(self._declared)})"
