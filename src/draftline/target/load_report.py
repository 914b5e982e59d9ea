"""transformers' loading report, read instead of silenced: a target whose tensors do not all
load fails here, naming them.

A checkpoint whose tensors are named or packed otherwise than the model class expects loads
with those layers randomly initialised, and transformers only logs it (a report of hundreds
of lines, which the vision tower alone would fill). Extraction and training would then run
for days on a random target. So every load asks for the report, sets aside the tensors no
stage reads by design (the vision tower, its projector, MTP layers: counted and said), and
refuses anything else missing, unexpected or mis-shaped.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field

from .load import TargetError
from .weights import is_other_tower

# How many distinct name patterns an error line spells out before it says "and N more".
SHOWN = 12


@dataclass
class LoadReport:
    model_class: str
    missing: list[str] = field(default_factory=list)  # the model's tensors no checkpoint tensor filled
    unexpected: list[str] = field(default_factory=list)  # checkpoint tensors the model has no place for
    mismatched: list[str] = field(default_factory=list)  # "name: checkpoint shape vs model shape"
    conversion: list[str] = field(default_factory=list)  # tensors transformers could not convert (fuse, dequantize)
    other_towers: int = 0  # checkpoint tensors of the vision tower, projector or MTP layers: skipped by design

    def problems(self) -> list[str]:
        parts = []
        for what, names in (("missing (they would load random)", self.missing),
                             ("unexpected (nothing reads them)", self.unexpected),
                             ("mis-shaped", self.mismatched),
                             ("not convertible (fused or dequantized from tensors of unequal shapes)", self.conversion)):
            if names:
                parts.append(f"{len(names)} {what}: {name_patterns(names)}")
        return parts

    def check(self, where: str) -> None:
        if parts := self.problems():
            hint = _hint(self)
            raise TargetError(f"{where} does not load as {self.model_class}: " + "; ".join(parts) + hint)

    def summary(self) -> dict:
        return {"model_class": self.model_class, "other_tower_tensors_skipped": self.other_towers}


def from_info(model_class: str, info: dict, other_towers: int) -> LoadReport:
    unexpected = sorted(k for k in info.get("unexpected_keys", ()) if not is_other_tower(k))
    mismatched = sorted(f"{k}: {tuple(a)} vs {tuple(b)}" for k, a, b in info.get("mismatched_keys", ()))
    return LoadReport(model_class, sorted(info.get("missing_keys", ())), unexpected, mismatched,
                      other_towers=other_towers)


def name_patterns(names: list[str]) -> str:
    """Every name, shortened by pattern: indices become N with the values they take
    (`model.layers.N.mlp.experts.N.up_proj.weight_packed [N: 1-3; 0-7] x24`)."""
    groups: dict[str, list[list[int]]] = defaultdict(list)
    for name in names:
        key = re.sub(r"(?<=\.)\d+(?=\.|$)", "N", name.split(":")[0]) + (":" + name.split(":", 1)[1] if ":" in name else "")
        groups[key].append([int(n) for n in re.findall(r"(?<=\.)\d+(?=\.|$)", name.split(":")[0])])
    shown = []
    for key, idx in list(groups.items())[:SHOWN]:
        if len(idx) == 1:
            shown.append(_fill(key, idx[0]))
            continue
        spans = "; ".join(_span(sorted({i[j] for i in idx})) for j in range(len(idx[0])))
        shown.append(f"{key} [N: {spans}] x{len(idx)}")
    more = len(groups) - SHOWN
    return ", ".join(shown) + (f" and {more} more patterns" if more > 0 else "")


def _fill(key: str, values: list[int]) -> str:
    it = iter(values)
    return re.sub(r"(?<=\.)N(?=\.|$|:)", lambda _: str(next(it)), key)


def _span(values: list[int]) -> str:
    if values == list(range(values[0], values[-1] + 1)) and len(values) > 2:
        return f"{values[0]}-{values[-1]}"
    return ",".join(map(str, values))


def _hint(report: LoadReport) -> str:
    quantized = [k for k in report.unexpected if k.rsplit(".", 1)[-1] in ("weight_packed", "weight_scale",
                                                                        "weight_shape", "weight_scale_inv")]
    if quantized:
        return (" (quantized tensors with no quantization_config that says how to read them: the checkpoint's "
                "config.json must carry it, docs/real-targets.md)")
    return ""


class ReportCapture(logging.Handler):
    """Catches the loading report transformers logs, without printing it: the names of the
    tensors it could not convert reach us only there (it then raises a generic error)."""

    LOGGER = "transformers.modeling_utils"

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(record.getMessage().splitlines())

    def conversion_errors(self) -> list[str]:
        plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in self.lines]
        return sorted({line.split("|")[0].strip() for line in plain if "| CONVERSION" in line})

    def __enter__(self):
        log = logging.getLogger(self.LOGGER)
        self._saved = (log.level, log.propagate)
        log.setLevel(logging.WARNING)
        log.propagate = False  # the report goes here only, not to the console
        log.addHandler(self)
        return self

    def __exit__(self, *exc):
        log = logging.getLogger(self.LOGGER)
        log.removeHandler(self)
        log.setLevel(self._saved[0])
        log.propagate = self._saved[1]
        return None
