"""The `card` section: what the drafter's model card says that the metrics cannot."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from .base import Section

# A hub id: owner/name, each of letters, digits, '-', '_', '.' (the hub's own rule).
_HUB_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"


class CardParams(Section):
    key: ClassVar[str] = "card"

    # The drafter's hub id (owner/name): the serve commands load it from there. None: they
    # load the local drafter folder, and the card says to set this before publishing.
    repo: str | None = None
    # The license the card declares. None: the target's own, as its files state it (its
    # README front matter, or the embedded package's metadata); a drafter trained on a
    # model's outputs is published under that model's terms.
    license: str | None = None

    @field_validator("repo")
    @classmethod
    def _hub_id(cls, v: str | None) -> str | None:
        import re

        if v is not None and not re.match(_HUB_ID, v):
            raise ValueError(f"not a hub id (owner/name): {v!r}")
        return v
