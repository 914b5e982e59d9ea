"""The target's license, as its own files state it: what the drafter's model card repeats.

A drafter trained on a model's outputs and hidden states is published under that model's
terms, so the card needs the target's license. A hub snapshot (or a local copy of one)
states it in its README.md front matter (`license:`, and for `other`, `license_name` and
`license_link`, as Kimi K2.x's modified MIT); the embedded GGUF states it in the metadata
of the package that ships it. Nothing is guessed: a folder that states none gives None,
and the card says so.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import yaml

KEYS = ("license", "license_name", "license_link")


def from_model_card(folder: Path) -> dict | None:
    """`license`, `license_name`, `license_link` of `folder`/README.md's front matter."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    text = readme.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    front = text.split("---", 2)[1] if text.count("---") >= 2 else ""
    try:
        meta = yaml.safe_load(front)
    except yaml.YAMLError:
        return None  # a card whose front matter does not parse states nothing we can repeat
    if not isinstance(meta, dict) or not meta.get("license"):
        return None
    return {k: str(meta[k]) for k in KEYS if meta.get(k)}


def from_package(name: str) -> dict | None:
    """The license a Python package declares (the embedded GGUF's), as a hub id: lower case."""
    try:
        meta = importlib.metadata.metadata(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    value = meta.get("License-Expression") or meta.get("License")
    return {"license": value.strip().lower()} if value and value.strip() else None
