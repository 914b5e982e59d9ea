"""Word shingles of many texts at once, as 64-bit hashes, without a Python loop per text.

Texts are normalised (NFKC, lower case, anything but letters and digits is a space) and
split into words by Arrow's vectorised string kernels; each distinct word of a call is
hashed once (xxh3-64 of its UTF-8 bytes), and k-word shingles are hashed from those word
hashes with NumPy. A word's hash depends on the word alone, so texts can be shingled in
chunks, in separate calls, and still be compared: 10M prompts never need their words in
memory at once.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

_P = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constant for polynomial combining


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a strong 64-bit bit mixer, vectorised."""
    x = x.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


@dataclass
class Words:
    ids: np.ndarray  # uint64 word hashes, all texts concatenated
    offsets: np.ndarray  # int64, len(texts) + 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def _split(arr: pa.Array) -> pa.ListArray:
    arr = pc.utf8_lower(pc.utf8_normalize(arr.cast(pa.large_string()), "NFKC"))
    # Only runs of separators other than spaces need replacing: far fewer matches than
    # every gap between words, and the whitespace split below does the rest.
    arr = pc.replace_substring_regex(arr, r"[^\p{L}\p{N}\s]+", " ")
    return pc.utf8_split_whitespace(arr)


def words(texts, workers: int | None = None) -> Words:
    """Words of a list of str, an Arrow string array or a polars Series."""
    if hasattr(texts, "to_arrow"):  # polars
        texts = texts.to_arrow()
    arr = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(texts, pa.large_string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    # Arrow's string kernels run single-threaded and release the GIL: split the batch.
    workers = workers or max(1, min(8, os.cpu_count() or 1))
    step = max(1, -(-len(arr) // workers))
    parts = [arr.slice(i, step) for i in range(0, len(arr), step)] or [arr]
    with ThreadPoolExecutor(len(parts)) as pool:
        lists = pa.chunked_array(list(pool.map(_split, parts))).combine_chunks()
    flat = lists.flatten()
    offsets = lists.offsets.to_numpy().astype(np.int64)
    # Splitting "" (or all punctuation) yields one empty word; drop those.
    keep = pc.not_equal(flat, "").to_numpy(zero_copy_only=False)
    if not keep.all():
        flat = flat.filter(pa.array(keep))
        offsets = np.concatenate([[0], np.cumsum(keep)])[offsets]
    if not len(flat):
        return Words(np.zeros(0, np.uint64), offsets)
    # One hash per distinct word (a chunk of prompts has far fewer words than tokens).
    enc = pc.dictionary_encode(flat)
    hashes = np.fromiter((xxhash.xxh3_64_intdigest(w) for w in enc.dictionary.cast(pa.large_binary()).to_pylist()),
                         np.uint64, count=len(enc.dictionary))
    return Words(hashes[enc.indices.to_numpy(zero_copy_only=False)], offsets)


def _poly(x: np.ndarray, k: int) -> np.ndarray:
    """Hash of every k-long window of x (Horner over shifted contiguous slices)."""
    m = len(x) - k + 1
    h = x[:m].copy()
    with np.errstate(over="ignore"):
        for j in range(1, k):
            h *= _P
            h += x[j : j + m]
    return h


def shingle_hashes(w: Words, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every k-word window of every text, and the text index of each.

    A text shorter than k words gives one shingle of all its words (so short texts can
    still match); an empty text gives none. Hashes depend only on the words, so the same
    window in two texts of one call hashes the same."""
    lens = w.lengths
    n = len(lens)
    x = mix64(w.ids + np.uint64(1))
    tokdoc = np.repeat(np.arange(n), lens)
    hs, docs = [], []
    if len(x) >= k:
        h = _poly(x, k)
        inside = tokdoc[: len(h)] == tokdoc[k - 1 :]  # window does not cross a text end
        hs.append(h[inside])
        docs.append(tokdoc[: len(h)][inside])
    short = np.flatnonzero((lens > 0) & (lens < k))
    if len(short):
        starts, width = w.offsets[short], lens[short]
        h = x[starts].copy()
        with np.errstate(over="ignore"):
            for j in range(1, int(width.max())):
                more = j < width
                h[more] = h[more] * _P + x[starts[more] + j]
        hs.append(h)
        docs.append(short)
    if not hs:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    h, doc = np.concatenate(hs), np.concatenate(docs)
    if len(hs) > 1:  # short texts' shingles go back among the others, in text order
        order = np.argsort(doc, kind="stable")
        h, doc = h[order], doc[order]
    return mix64(h), doc
