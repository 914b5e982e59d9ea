"""Hidden-state shards: a few large safetensors files plus one index.

Each shard holds, for many rows packed end to end along the token axis:
  context   [tokens, len(layer_ids) * hidden]  bf16  target states at the chosen layers
  final     [tokens, hidden]                   bf16  final (post-norm) state, for teacher logits
  input_ids [tokens] int32, loss_mask [tokens] uint8
The index maps a row to (shard, offset, length). Thousands of rows per file keep DVC and
the filesystem fast; per-sample files are what makes peers' extractions take days to copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..io import atomic_path, read_json, write_json

INDEX = "index.json"


class ShardWriter:
    def __init__(self, folder: Path, shard_tokens: int, meta: dict):
        self.folder, self.shard_tokens, self.meta = folder, shard_tokens, meta
        self.rows: list[dict] = []
        self._ids: set[str] = set()
        self.buf: dict[str, list[torch.Tensor]] = {"context": [], "final": [], "input_ids": [], "loss_mask": []}
        self.buffered = 0
        self.shards: list[str] = []

    def add(self, row_id: str, split: str, context, final, input_ids, loss_mask) -> None:
        if row_id in self._ids:  # readers key sequences by id: a repeat would alias two of them
            raise ValueError(f"extract: sequence id {row_id!r} appears twice")
        self._ids.add(row_id)
        n = int(input_ids.shape[0])
        self.rows.append({"id": row_id, "split": split, "shard": len(self.shards),
                          "offset": self.buffered, "length": n,
                          "supervised": int(loss_mask.sum())})
        self.buf["context"].append(context.to(torch.bfloat16))
        self.buf["final"].append(final.to(torch.bfloat16))
        self.buf["input_ids"].append(input_ids.to(torch.int32))
        self.buf["loss_mask"].append(loss_mask.to(torch.uint8))
        self.buffered += n
        if self.buffered >= self.shard_tokens:
            self.flush()

    def flush(self) -> None:
        if not self.buffered:
            return
        name = f"shard-{len(self.shards):05d}.safetensors"
        tensors = {k: torch.cat(v).contiguous() for k, v in self.buf.items()}
        with atomic_path(self.folder / name) as tmp:
            save_file(tensors, str(tmp))
        self.shards.append(name)
        self.buf = {k: [] for k in self.buf}
        self.buffered = 0

    def close(self) -> None:
        self.flush()
        write_json(self.folder / INDEX, {**self.meta, "shards": self.shards, "rows": self.rows})


@dataclass
class Sequence:
    id: str
    split: str
    context: torch.Tensor  # [T, L*H]
    final: torch.Tensor  # [T, H]
    input_ids: torch.Tensor  # [T] long
    loss_mask: torch.Tensor  # [T] float


def read_index(folder: Path) -> dict:
    return read_json(folder / INDEX)


def load_sequences(folder: Path, split: str | None = None, dtype=torch.float32) -> list[Sequence]:
    """Load rows into memory (the embedded default is tens of MB; a large run streams)."""
    index = read_index(folder)
    by_shard: dict[int, list[dict]] = {}
    for r in index["rows"]:
        if split is None or r["split"] == split:
            by_shard.setdefault(r["shard"], []).append(r)
    out = []
    for s, rows in sorted(by_shard.items()):
        with safe_open(str(folder / index["shards"][s]), framework="pt") as f:
            t = {k: f.get_tensor(k) for k in ("context", "final", "input_ids", "loss_mask")}
        for r in rows:
            sl = slice(r["offset"], r["offset"] + r["length"])
            out.append(Sequence(r["id"], r["split"], t["context"][sl].to(dtype), t["final"][sl].to(dtype),
                                t["input_ids"][sl].long(), t["loss_mask"][sl].float()))
    return out
