"""Duplicate removal: exact (on normalised text), then near-duplicates (MinHash LSH).

Both keep the first row of each group in input order (the sources' order), so which row
survives does not depend on anything but the data.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter

from ..config import NearDedupeParams
from .near_dedupe import near_duplicates


def normalise(text: str) -> str:
    """Case-, accent-width- and whitespace-insensitive form used for exact dedupe."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(text.split())


def prompt_text(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] == "user")


def dedupe(rows: list[dict]) -> tuple[list[dict], int]:
    """Keep the first row of each normalised text (input order is the source order)."""
    seen: set[str] = set()
    kept = []
    for r in rows:
        key = hashlib.sha1(normalise(prompt_text(r["messages"])).encode()).hexdigest()
        if key not in seen:
            seen.add(key)
            kept.append(r)
    return kept, len(rows) - len(kept)


def near_dedupe(rows: list[dict], p: NearDedupeParams, seed: int) -> tuple[list[dict], Counter, dict]:
    """Drop near-duplicates (MinHash LSH, near_dedupe.py); the first of
    each group in input order stays. Counts dropped rows per source."""
    if not p.enabled or not rows:
        return rows, Counter(), {}
    drop, stats = near_duplicates([prompt_text(r["messages"]) for r in rows], p, seed)
    kept = [r for r, d in zip(rows, drop) if not d]
    return kept, Counter(r["source"] for r, d in zip(rows, drop) if d), stats
