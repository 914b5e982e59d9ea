"""Decontamination: training prompts that share a word n-gram with an eval prompt go."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .dedupe import prompt_text
from .shingles import shingle_hashes, words


def decontaminate(train: list[dict], eval_rows: list[dict], n: int) -> tuple[list[dict], Counter]:
    """Drop training prompts sharing any word n-gram with an eval prompt.

    An eval prompt shorter than n words is looked for whole (as a word sequence) inside
    every training prompt, so a short benchmark question copied into training data is
    still caught. Vectorised: both sides are shingled in one batch and compared by hash."""
    if not train or not eval_rows:
        return train, Counter()
    nt = len(train)
    w = words([prompt_text(r["messages"]) for r in train] + [prompt_text(r["messages"]) for r in eval_rows])
    lens = w.lengths
    hit = np.zeros(nt, bool)
    h, doc = shingle_hashes(w, n)
    full = lens[doc] >= n
    banned = np.unique(h[(doc >= nt) & full])
    tr = (doc < nt) & full
    hit[doc[tr][np.isin(h[tr], banned)]] = True
    eval_lens = lens[nt:]
    for length in np.unique(eval_lens[(eval_lens > 0) & (eval_lens < n)]):
        h, doc = shingle_hashes(w, int(length))
        ev = (doc >= nt) & (lens[doc] == length)
        tr = doc < nt
        hit[doc[tr][np.isin(h[tr], h[ev])]] = True
    kept = [r for r, x in zip(train, hit) if not x]
    return kept, Counter(r["source"] for r, x in zip(train, hit) if x)
