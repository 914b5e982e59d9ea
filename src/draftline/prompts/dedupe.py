"""Duplicate removal: exact (on normalised text), then near-duplicates (MinHash LSH).

Both keep the first row of each group in input order (the sources' order), so which row
survives does not depend on anything but the data. Frames carry the user text in a
`text` column (schema.user_text).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import polars as pl

from .near_dedupe import CHUNK, near_duplicates

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.mix import NearDedupeParams


def normalised(text: pl.Expr) -> pl.Expr:
    """Case-, width- and whitespace-insensitive form used for exact dedupe: NFKC, lower
    case, each run of whitespace one space (Python's str.split whitespace, \\x1c-\\x1f included)."""
    return (text.str.normalize("NFKC").str.to_lowercase().str.replace_all(r"[\s\x1c-\x1f]+", " ")
            .str.strip_chars(" "))


def dedupe(df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Keep the first row of each normalised text (input order is the source order)."""
    # Two 64-bit hashes of the normalised text stand for it (a collision among 10M prompts:
    # about 1e-25), so the set of seen texts costs 16 bytes a prompt, not the text again.
    key = normalised(pl.col("text"))
    # (In a lazy frame, so the text is normalised once for both.)
    kept = df.lazy().filter(pl.struct(key.hash(1).alias("a"), key.hash(2).alias("b")).is_first_distinct()).collect()
    return kept, df.height - kept.height


def near_dedupe(df: pl.DataFrame, p: NearDedupeParams, seed: int,
                chunk: int = CHUNK) -> tuple[pl.DataFrame, Counter, dict]:
    """Drop near-duplicates (MinHash LSH, near_dedupe.py); the first of each group in input
    order stays. Counts dropped rows per source."""
    if not p.enabled or not df.height:
        return df, Counter(), {}
    drop, stats = near_duplicates(df["text"], p, seed, chunk)
    mask = pl.Series(drop)
    return df.filter(~mask), counts(df.filter(mask), "source"), stats


def counts(df: pl.DataFrame, column: str) -> Counter:
    """Rows per value of `column`."""
    return Counter(dict(df.group_by(column).len().iter_rows()))
