"""Near-duplicate removal with MinHash LSH, vectorised, in memory that does not grow with
the text.

Signatures: each k-word shingle hash (64-bit, well mixed; shingles.py) is mapped through
`num_perm` 32-bit multiplicative permutations and the minimum per text is kept, computed
over blocks of shingles with NumPy reductions in parallel threads.

Texts are signed in chunks of CHUNK. Each chunk's signatures and band keys go to files in
a scratch folder (under TMPDIR) and leave memory, so at 10M prompts the 5 GB of
signatures and 2.5 GB of band keys are on disk, not in RAM.

Candidates: band by band, one band's keys are read back and sorted, and every text in a
bucket is linked to the bucket's first (lowest index) text; the links are merged into one
sorted set of pairs as each band finishes, so memory follows the number of candidate
pairs. A link is kept only when the two signatures agree on at least `threshold` of their
positions (the MinHash estimate of Jaccard similarity), read from the signature file a
block of pairs at a time, so a band collision alone never removes a prompt. Texts joined
by kept links form groups; the first text of each group (input order) is kept, the rest
are near-duplicates. Deterministic for a given seed.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..io import remove, temp_beside
from .shingles import shingle_hashes, words

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.mix import NearDedupeParams

_EMPTY = np.iinfo(np.uint32).max
CHUNK = 1 << 18  # texts signed at a time: ~1 GB of words, shingles and signatures at most
PAIRS = 1 << 16  # candidate pairs verified at a time


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


def chunks(texts, size: int):
    """Slices of a list, an Arrow array or a polars Series (a Series slice becomes Arrow
    only when it is shingled: the whole column is never copied)."""
    for lo in range(0, len(texts), size):
        yield texts.slice(lo, size) if hasattr(texts, "slice") else texts[lo : lo + size]


def _sign_to_disk(texts, s: NearDedupeParams, seed: int, folder: Path, chunk: int) -> np.ndarray:
    """Signatures to `folder/signatures` ([n, num_perm] uint32, row-major) and each band's
    keys to `folder/band-<b>` ([n] uint64), chunk by chunk. Returns which texts have words."""
    has_words = []
    files = [open(folder / "signatures", "wb")] + [open(folder / f"band-{b}", "wb") for b in range(s.bands)]
    try:
        for part in chunks(texts, chunk):
            sig = signatures(part, s, seed)
            files[0].write(sig.tobytes())
            keys = _band_keys(sig, s.bands)
            for b in range(s.bands):
                files[b + 1].write(np.ascontiguousarray(keys[:, b]).tobytes())
            has_words.append(sig[:, 0] != _EMPTY)
    finally:
        for f in files:
            f.close()
    return np.concatenate(has_words) if has_words else np.zeros(0, bool)


def _candidates(folder: Path, idx: np.ndarray, n: int, bands: int) -> np.ndarray:
    """Sorted unique pairs first * n + other, over every band."""

    def band(b: int) -> np.ndarray:
        keys = np.fromfile(folder / f"band-{b}", np.uint64)[idx]
        perm = np.argsort(keys, kind="stable")
        order, ks = idx[perm], keys[perm]
        new_group = np.concatenate([[True], ks[1:] != ks[:-1]])
        # every member of a bucket links to the bucket's first (lowest index) text
        first = order[np.maximum.accumulate(np.where(new_group, np.arange(len(order)), 0))]
        member = ~new_group
        return np.unique(first[member] * np.int64(n) + order[member])

    pairs = np.zeros(0, np.int64)
    with ThreadPoolExecutor(min(_workers(), 2)) as pool:  # two bands' keys in memory at a time
        for links in pool.map(band, range(bands)):
            pairs = np.union1d(pairs, links)  # a pair found in several bands is verified once
    return pairs


def _agreement(folder: Path, n: int, num_perm: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Share of signature positions each pair agrees on, reading signature rows from the
    mapped file and dropping the mapped pages after each block of pairs."""
    agree = np.empty(len(src))
    if not len(src):
        return agree
    with open(folder / "signatures", "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        sig = np.frombuffer(mm, np.uint32).reshape(n, num_perm)
        for lo in range(0, len(src), PAIRS):
            hi = lo + PAIRS
            agree[lo:hi] = (sig[src[lo:hi]] == sig[dst[lo:hi]]).mean(axis=1)
            mm.madvise(mmap.MADV_DONTNEED)  # pages read stay in the page cache, not in this process
        del sig
    finally:
        mm.close()
    return agree


def near_duplicates(texts, s: NearDedupeParams, seed: int, chunk: int = CHUNK) -> tuple[np.ndarray, dict]:
    """Boolean mask of texts to drop (a near-duplicate of an earlier text), and counts.
    `texts`: a list of str, an Arrow string array or a polars Series. `mix.near_dedupe` sets the shingle,
    permutations, bands and threshold; `mix.seed` the permutations."""
    n = len(texts)
    # A scratch folder named for this process: a killed run's folder is removed by the next.
    folder = temp_beside(Path(tempfile.gettempdir()) / "draftline-near-dedupe")
    folder.mkdir(parents=True)
    try:
        has_words = _sign_to_disk(texts, s, seed, folder, chunk)
        scratch = sum(f.stat().st_size for f in folder.iterdir())
        pairs = _candidates(folder, np.flatnonzero(has_words), n, s.bands)
        src, dst = pairs // n, pairs % n
        del pairs
        keep = _agreement(folder, n, s.num_perm, src, dst) >= s.threshold
    finally:
        remove(folder)
    label = _components(n, src[keep], dst[keep])
    drop = label != np.arange(n)
    return drop, {"candidate_pairs": int(len(src)), "verified_pairs": int(keep.sum()), "dropped": int(drop.sum()),
                  "scratch_bytes": int(scratch)}
