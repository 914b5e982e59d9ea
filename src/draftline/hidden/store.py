"""The extract stage's output: index.json, manifest.json and the shards, and where they are
(reader.py reads their rows).

Each shard (shard_file.py) holds, for many rows packed end to end along the token axis:
  input_ids [T] int32, loss_mask [T] uint8
  states    [T, C] bf16   the target's states at `target_layer_ids`, side by side, then the
                          final (post-norm) state when `teacher` is "final"; or FP8 e4m3
  state_scales [T, G] f32 with one scale per token and state (state_dtype.py)
  topk_ids [T, k] int32, topk_logprobs [T, k] bf16   when `teacher` is "top_k"
index.json maps a row to (shard, offset, length); manifest.json gives each shard's size,
xxh3-128 hash and per-layer statistics (state_stats.py). Thousands of rows per file keep DVC and the filesystem fast; per-sample files
are what makes peers' extractions take days to copy.

Where the shards are: beside the index, or in the folder the index names (`shard_dir`,
shards kept out of the DVC cache); `DRAFTLINE_SHARD_DIR` points elsewhere, for a colleague
who copied them to another path.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
import xxhash

from ..io import read_json
from .state_dtype import of_header

INDEX = "index.json"
MANIFEST = "manifest.json"


class ShardsMissing(ValueError):
    """A shard is missing, damaged, or of another extraction's format."""


@dataclass
class Sequence:
    id: str
    split: str
    context: torch.Tensor  # [T, L*H]
    final: torch.Tensor | None  # [T, H]; None when the teacher was stored as top-k or not at all
    input_ids: torch.Tensor  # [T] long
    loss_mask: torch.Tensor  # [T] float
    topk_ids: torch.Tensor | None = None  # [T, k] long
    topk_logprobs: torch.Tensor | None = None  # [T, k] float
    context_scale: torch.Tensor | None = None  # [T, layers] float32: FP8 states' scales (state_dtype.py)
    final_scale: torch.Tensor | None = None  # [T, 1] float32


def read_index(folder: Path) -> dict:
    return read_json(Path(folder) / INDEX)


def shard_folder(folder: Path, index: dict | None = None) -> Path:
    index = index if index is not None else read_index(folder)
    if not index.get("shard_dir"):
        return Path(folder)
    return Path(os.environ.get("DRAFTLINE_SHARD_DIR") or index["shard_dir"])


def check_shards(folder: Path, hashes: bool = False) -> Path:
    """The shard folder, once every shard of the manifest is there at its size (and, with
    `hashes`, its xxh3-128 hash); else one line naming the first that is not."""
    folder = Path(folder)
    manifest = read_json(folder / MANIFEST)
    where = shard_folder(folder, manifest)
    for s in manifest["shards"]:
        f = where / s["name"]
        check_format(f, manifest.get("dtype", "bfloat16"))
        if not f.is_file() or f.stat().st_size != s["bytes"]:
            found = f"{f.stat().st_size} bytes" if f.is_file() else "missing"
            raise ShardsMissing(f"{f}: {found}, the manifest says {s['bytes']} bytes; copy the shards there or set "
                                "DRAFTLINE_SHARD_DIR (docs/real-targets.md, 'Where the hidden states live')")
        if hashes and file_digest(f) != s["xxh3_128"]:
            raise ShardsMissing(f"{f}: its xxh3-128 hash differs from the manifest's; the copy is damaged")
    return where


def file_digest(path: Path, chunk: int = 1 << 24) -> str:
    """xxh3-128, hex: the manifest's hash (`xxhsum -H2` prints the same)."""
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while buf := f.read(chunk):
            h.update(buf)
    return h.hexdigest()


def shard_header(path: Path) -> dict:
    """A shard's safetensors header (a few hundred bytes, whatever the shard's size)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def check_format(path: Path, state_dtype: str, header: dict | None = None) -> None:
    """Refuse, in one line, a shard whose header stores its states otherwise than
    `state_dtype` (the index's): a folder mixing two extractions' shards. A missing file
    passes (the size check names it)."""
    if header is None:
        if not Path(path).is_file():
            return
        header = shard_header(path)
    found = of_header(header["states"]["dtype"], path)
    if found != state_dtype:
        raise ShardsMissing(f"{path}: states stored as {found}, but this extraction's index and manifest say "
                            f"{state_dtype}: the folder mixes two extractions' shards; re-extract, or point "
                            "DRAFTLINE_SHARD_DIR at one extraction's shards")
