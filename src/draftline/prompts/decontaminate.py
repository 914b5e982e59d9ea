"""Decontamination: training prompts that share a word n-gram with an eval prompt go."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl

from .dedupe import counts
from .near_dedupe import CHUNK, chunks
from .shingles import shingle_hashes, words


def contaminated(train, evals, n: int, chunk: int = CHUNK) -> np.ndarray:
    """Which training texts share a word n-gram with an eval text (lists of str, Arrow
    string arrays or polars Series).

    An eval text shorter than n words is looked for whole (as a word sequence) inside every
    training text, so a short benchmark question copied into training data is still caught.
    Vectorised: the eval texts' n-grams are hashed once, the training texts' a chunk at a
    time (word hashes depend on the word alone, shingles.py), and compared by hash."""
    hit = np.zeros(len(train), bool)
    if not len(train) or not len(evals):
        return hit
    ew = words(evals)
    elens = ew.lengths
    h, doc = shingle_hashes(ew, n)
    banned = np.unique(h[elens[doc] >= n])
    # Eval texts shorter than n words: each whole text, by its length.
    short = {}
    for length in np.unique(elens[(elens > 0) & (elens < n)]):
        h, doc = shingle_hashes(ew, int(length))
        short[int(length)] = np.unique(h[elens[doc] == length])
    for lo, part in zip(range(0, len(train), chunk), chunks(train, chunk)):
        w = words(part)
        lens = w.lengths
        h, doc = shingle_hashes(w, n)
        full = lens[doc] >= n
        hit[lo + doc[full][np.isin(h[full], banned)]] = True
        for length, hashes in short.items():
            h, doc = shingle_hashes(w, length)
            hit[lo + doc[np.isin(h, hashes)]] = True
    return hit


def decontaminate(train: pl.DataFrame, evals: pl.DataFrame, n: int) -> tuple[pl.DataFrame, Counter]:
    """Drop training prompts sharing any word n-gram with an eval prompt (`text` columns)."""
    if not train.height or not evals.height:
        return train, Counter()
    mask = pl.Series(contaminated(train["text"], evals["text"], n))
    return train.filter(~mask), counts(train.filter(mask), "source")
