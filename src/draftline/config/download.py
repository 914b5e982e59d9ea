"""The `download` section: the prompt sources, each mapped to one schema."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from .base import PositiveInt, Section

SourceKind = Literal["local", "hf", "humaneval", "mtbench", "nemotron", "infinity_instruct", "codealpaca",
                     "sharegpt", "ultrachat", "magpie", "opencodeinstruct", "gsm8k", "math"]
ADAPTER_KINDS = {"nemotron", "infinity_instruct", "codealpaca", "sharegpt", "ultrachat", "magpie",
                 "opencodeinstruct", "gsm8k", "math"}


class SourceParams(Section):
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    # local: a JSONL/Parquet file with field names below; hf: any hub dataset with field
    # names below; humaneval/mtbench: shipped benchmark prompts; the rest: a known
    # source's schema and category labels (prompts/adapters.py).
    kind: SourceKind
    # train: prompts for regeneration; eval: held-out benchmark prompts; split: the first
    # `holdout` prompts (in the benchmark's order) are eval, the rest train. Mix drops any
    # training prompt sharing an n-gram with an eval prompt, so the split stays clean.
    role: Literal["train", "eval", "split"] = "train"
    holdout: PositiveInt | None = None
    # local: the file. hf: the dataset id (or a local dataset folder). Known sources:
    # a local file in that source's published schema, read instead of the hub.
    path: str | None = None
    # Known sources on the hub: dataset id, config, split and data files, when not the
    # adapter's defaults.
    dataset: str | None = None
    config: str | None = None
    split: str | None = None
    data_files: str | None = None
    # Hub commit (or tag): required for hub reads, so a mix can be rebuilt exactly.
    revision: str | None = None
    # Category for every row, overriding the source's labels and the rule.
    category: str | None = None
    # Field names for kind local/hf: messages or prompt, plus category.
    messages_field: str = "messages"
    prompt_field: str = "prompt"
    category_field: str = "category"
    max_rows: PositiveInt | None = None

    @model_validator(mode="after")
    def _needs_path(self) -> "SourceParams":
        if self.kind in ("local", "hf") and not self.path:
            raise ValueError(f"source '{self.name}' of kind {self.kind} needs 'path'")
        if (self.role == "split") != (self.holdout is not None):
            raise ValueError(f"source '{self.name}': 'holdout' goes with role split, and role split needs it")
        return self


class DownloadParams(Section):
    key: ClassVar[str] = "download"

    sources: list[SourceParams] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "DownloadParams":
        names = [s.name for s in self.sources]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate source names: {sorted(dup)}")
        return self
