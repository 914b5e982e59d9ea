"""What a card is made from: the files the earlier stages wrote, and the declared params."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..io import read_json


@dataclass(frozen=True)
class CardInputs:
    config: dict  # the drafter's config.json
    info: dict  # the target's info.json (provenance, license)
    benchmark: dict  # metrics, one dict per stage
    download: dict = field(default_factory=dict)
    mix: dict = field(default_factory=dict)
    regenerate: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    recipe: dict = field(default_factory=dict)  # the `train` params
    sources: list[dict] = field(default_factory=list)  # `download.sources`
    repo: str | None = None  # card.repo
    license: str | None = None  # card.license


@dataclass(frozen=True)
class CardFiles:
    drafter: Path
    info: Path
    benchmark: Path
    download: Path
    mix: Path
    regenerate: Path
    train: Path

    def missing(self) -> Path | None:
        """The first input that does not exist (the stages before the card did not run)."""
        needed = [self.drafter / "config.json", self.info, self.benchmark, self.download, self.mix,
                  self.regenerate, self.train]
        return next((p for p in needed if not p.exists()), None)

    def read(self, params) -> CardInputs:
        load = read_json
        return CardInputs(
            config=load(self.drafter / "config.json"), info=load(self.info), benchmark=load(self.benchmark),
            download=load(self.download), mix=load(self.mix), regenerate=load(self.regenerate),
            train=load(self.train), recipe=params.train.model_dump(),
            sources=[s.model_dump(exclude_none=True) for s in params.download.sources],
            repo=params.card.repo, license=params.card.license)
