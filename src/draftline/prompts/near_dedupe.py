"""Near-duplicate removal with MinHash LSH, vectorised end to end.

Signatures: each k-word shingle hash (64-bit, well mixed; shingles.py) is
mapped through `num_perm` 32-bit multiplicative permutations and the minimum per text is
kept, computed over blocks of shingles with NumPy reductions in parallel threads.
Candidates: for each of `bands` bands the rows' band keys are sorted, and every text in a
bucket is linked to the bucket's first (lowest index) text. A link is kept only when the
two signatures agree on at least `threshold` of their positions (the MinHash estimate of
Jaccard similarity), so a band collision alone never removes a prompt. Texts joined by
kept links form groups; the first text of each group (input order) is kept, the rest are
near-duplicates. Deterministic for a given seed.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..config import NearDedupeParams
from .shingles import shingle_hashes, words

_EMPTY = np.iinfo(np.uint32).max


def _perms(s: NearDedupeParams, seed: int) -> np.ndarray:
    # Odd 32-bit multipliers: x -> a*x mod 2^32 is a bijection of 32-bit values.
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2**31, size=s.num_perm, dtype=np.uint64) * 2 + 1).astype(np.uint32)


def _workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def signatures(texts, s: NearDedupeParams, seed: int, block: int = 1 << 16) -> np.ndarray:
    """[n_texts, num_perm] uint32 MinHash signatures; texts without words get all-max rows."""
    w = words(texts)
    h, doc = shingle_hashes(w, s.shingle)
    n = len(w.offsets) - 1
    sig = np.full((n, s.num_perm), _EMPTY, dtype=np.uint32)
    if len(h) == 0:
        return sig
    a = _perms(s, seed)[:, None]
    h32 = (h >> np.uint64(32)).astype(np.uint32)
    # Blocks end on text boundaries, so each text's minimum is taken in one block.
    text_starts = np.concatenate([[0], np.flatnonzero(np.diff(doc)) + 1])
    marks = np.searchsorted(text_starts, np.arange(0, len(h), block)).clip(max=len(text_starts) - 1)
    cut = np.unique(np.concatenate([text_starts[marks], [0, len(h)]]))

    def one(lo: int, hi: int) -> None:
        # [num_perm, shingles] layout: the min per text runs along contiguous memory;
        # NumPy releases the GIL, so blocks run in parallel threads. 32-bit
        # multiplicative hashing (odd a: a bijection on the well-mixed 32-bit shingle
        # hashes) halves the memory traffic of 64-bit arithmetic.
        buf = np.empty((s.num_perm, hi - lo), np.uint32)
        with np.errstate(over="ignore"):
            np.multiply(a, h32[None, lo:hi], out=buf)
        seg = text_starts[(text_starts >= lo) & (text_starts < hi)] - lo
        sig[doc[lo + seg]] = np.minimum.reduceat(buf, seg, axis=1).T

    with ThreadPoolExecutor(_workers()) as pool:
        list(pool.map(one, cut[:-1], cut[1:]))
    return sig


def _band_keys(sig: np.ndarray, bands: int) -> np.ndarray:
    """[n, bands] uint64 hash of each band's rows, all bands at once."""
    n, perm = sig.shape
    parts = sig.reshape(n, bands, perm // bands)
    k = np.zeros((n, bands), np.uint64)
    with np.errstate(over="ignore"):
        for c in range(parts.shape[2]):
            k ^= parts[:, :, c]
            k *= np.uint64(0x100000001B3)
    return k


def _components(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Smallest index of each text's group, by min-label propagation with pointer jumping."""
    label = np.arange(n)
    while True:
        new = label.copy()
        np.minimum.at(new, dst, label[src])
        np.minimum.at(new, src, label[dst])
        new = new[new]  # jump: a label's own label is at most it
        if np.array_equal(new, label):
            return label
        label = new


def near_duplicates(texts, s: NearDedupeParams, seed: int) -> tuple[np.ndarray, dict]:
    """Boolean mask of texts to drop (a near-duplicate of an earlier text), and counts.
    `mix.near_dedupe` sets the shingle, permutations, bands and threshold; `mix.seed` the
    permutations."""
    sig = signatures(texts, s, seed)
    n = len(sig)
    idx = np.flatnonzero(sig[:, 0] != _EMPTY)  # texts with at least one word
    keys = np.ascontiguousarray(_band_keys(sig[idx], s.bands).T)  # [bands, texts]

    def band(t: int) -> np.ndarray:
        perm = np.argsort(keys[t], kind="stable")
        order, ks = idx[perm], keys[t][perm]
        new_group = np.concatenate([[True], ks[1:] != ks[:-1]])
        # every member of a bucket links to the bucket's first (lowest index) text
        first = order[np.maximum.accumulate(np.where(new_group, np.arange(len(order)), 0))]
        member = ~new_group
        return first[member] * np.int64(n) + order[member]

    with ThreadPoolExecutor(_workers()) as pool:
        links = list(pool.map(band, range(s.bands)))
    # A pair found in several bands is verified once.
    pairs = np.unique(np.concatenate(links)) if links else np.zeros(0, np.int64)
    src, dst = pairs // n, pairs % n
    agree = np.empty(len(pairs))
    for lo in range(0, len(pairs), 1 << 16):  # bounded memory for the comparison
        agree[lo : lo + (1 << 16)] = (sig[src[lo : lo + (1 << 16)]] == sig[dst[lo : lo + (1 << 16)]]).mean(axis=1)
    keep = agree >= s.threshold
    label = _components(n, src[keep], dst[keep])
    drop = label != np.arange(n)
    return drop, {"candidate_pairs": int(len(pairs)), "verified_pairs": int(keep.sum()), "dropped": int(drop.sum())}
