"""Rows of the extract stage's output, read on demand from memory-mapped shards.

`ShardRows(folder, split)` is a sequence of `Sequence`s whose tensors are read only when a
row is asked for, in their stored dtypes (states bf16 or FP8 with their scales, ids int32;
`state_dtype.widen` makes them float32 on the device): a trainer holds the index
(ids, lengths) and the rows of the batches it is working on, never the dataset. At 27B width
the stored states are 61 KB a token, so a training split is terabytes; the same reader
serves the embedded default, whose rows then simply stay in the page cache.

Each row is copied out of the mapping, and the mapping's pages are then dropped from the
process (MADV_DONTNEED: the file's pages stay in the kernel's page cache, but no longer
count as this process's resident memory). Without it a pass over a 20 GB split would leave
20 GB of file pages mapped into every trainer, and its RSS would grow with the data.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from .state_dtype import widen
from .store import MANIFEST, Sequence, check_format, check_shards, read_index, shard_folder

# The dtypes extract writes, as numpy reads them (bf16 and FP8 are read as integers of their
# size and reinterpreted).
_NUMPY = {"BF16": (np.int16, torch.bfloat16), "F8_E4M3": (np.uint8, torch.float8_e4m3fn), "F32": (np.float32, None),
          "I32": (np.int32, None), "U8": (np.uint8, None)}
OPEN_SHARDS = 64  # mappings kept open at once: a 12 TB split is 6,000 shards, more than an fd limit
PAGE = mmap.PAGESIZE


class _Mapped:
    """One shard file, mapped; `rows(name, a, b)` copies rows a..b of a tensor out."""

    def __init__(self, path: Path, state_dtype: str):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            self.header = json.loads(f.read(n))
            check_format(path, state_dtype, self.header)
            self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.base = 8 + n
        self.path = path

    def rows(self, name: str, a: int, b: int) -> torch.Tensor:
        entry = self.header[name]
        np_dtype, as_torch = _NUMPY[entry["dtype"]]
        shape = entry["shape"]
        row = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        item = np.dtype(np_dtype).itemsize
        start = self.base + entry["data_offsets"][0] + a * row * item
        count = (b - a) * row
        out = np.frombuffer(self.mm, dtype=np_dtype, count=count, offset=start).copy()
        self._drop(start, count * item)
        t = torch.from_numpy(out).view(-1, *shape[1:]) if len(shape) > 1 else torch.from_numpy(out)
        return t.view(as_torch) if as_torch is not None else t

    def _drop(self, start: int, size: int) -> None:
        lo = start - start % PAGE
        hi = min(start + size, len(self.mm))
        if hi > lo:
            self.mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def close(self) -> None:
        self.mm.close()


class ShardRows:
    """The rows of `split` (None: all), in index order, read when indexed.

    `rows[i]` / `rows[a:b]` -> Sequence(s) with context and final as stored (bf16, or FP8
    with their float32 scales), input_ids and top-k ids as int64, loss_mask as float32,
    top-k log-probs in bf16. Widen the states on the compute device (`state_dtype.widen`)."""

    def __init__(self, folder: Path, split: str | None = None):
        folder = Path(folder)
        index = read_index(folder)
        self.where = check_shards(folder) if (folder / MANIFEST).exists() else shard_folder(folder, index)
        self.shards = index["shards"]
        self.teacher = index.get("teacher", "final")
        self.state_dtype = index.get("dtype", "bfloat16")
        self.layers = len(index["target_layer_ids"])
        self.width = self.layers * index["hidden_size"]
        self.index = [r for r in index["rows"] if split is None or r["split"] == split]
        self.ids = [r["id"] for r in self.index]
        self.lengths = [r["length"] for r in self.index]
        self._open: OrderedDict[int, _Mapped] = OrderedDict()

    def __len__(self) -> int:
        return len(self.index)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        r = self.index[i]
        m = self._shard(r["shard"])
        a, b = r["offset"], r["offset"] + r["length"]
        states = m.rows("states", a, b)
        final = states[:, self.width :] if self.teacher == "final" else None
        scales = m.rows("state_scales", a, b) if "state_scales" in m.header else None
        topk = "topk_ids" in m.header
        return Sequence(r["id"], r["split"], states[:, : self.width], final, m.rows("input_ids", a, b).long(),
                        m.rows("loss_mask", a, b).float(), m.rows("topk_ids", a, b).long() if topk else None,
                        m.rows("topk_logprobs", a, b) if topk else None,
                        None if scales is None else scales[:, : self.layers],
                        None if scales is None or final is None else scales[:, self.layers :])

    def read(self, indices: list[int]) -> list[Sequence]:
        return [self[i] for i in indices]

    def token_ids(self):
        """(id, input_ids) of each row, reading nothing else (the head vocabulary's counts)."""
        for r in self.index:
            yield r["id"], self._shard(r["shard"]).rows("input_ids", r["offset"], r["offset"] + r["length"])

    def _shard(self, s: int) -> _Mapped:
        if s in self._open:
            self._open.move_to_end(s)
            return self._open[s]
        if len(self._open) >= OPEN_SHARDS:
            self._open.popitem(last=False)[1].close()
        m = self._open[s] = _Mapped(self.where / self.shards[s], self.state_dtype)
        return m

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()


def load_sequences(folder: Path, split: str | None = None, dtype=torch.float32) -> list[Sequence]:
    """Every row of `split` in memory, states widened (FP8: with their scales) to `dtype`
    (train.loader: memory; tests). Training at scale streams the rows instead (reader.py)."""
    rows = ShardRows(folder, split)
    try:
        return [_as(s, dtype) for s in rows]
    finally:
        rows.close()


def _as(s: Sequence, dtype) -> Sequence:
    return Sequence(s.id, s.split, widen(s.context, s.context_scale).to(dtype),
                    None if s.final is None else widen(s.final, s.final_scale).to(dtype),
                    s.input_ids, s.loss_mask, s.topk_ids, None if s.topk_logprobs is None else s.topk_logprobs.float())
