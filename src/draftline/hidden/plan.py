"""The extraction plan: what one token costs on disk, which rows go in which shard, which
rank writes which shard, and whether it fits, all decided from lengths alone before the
target is loaded.

A plan depends only on the rows' lengths and the params, never on the number of
processes: shard i holds the same rows in the same order under 1 or 8 ranks, so their
bytes are the same, and a rerun with another world size still resumes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .state_dtype import SCALE_BYTES, is_fp8, itemsize

TEACHERS = ("final", "top_k", "none")
BF16, I32, U8 = 2, 4, 1


class PlanError(Exception):
    """The extraction cannot run as planned (no space, an empty input)."""


@dataclass(frozen=True)
class Record:
    """The per-token layout of a shard (see shard_file.py).

    states: the captured layers' states, then the final state when it is the teacher,
    side by side in one row of `state_dtype` (written front to back, one batch after
    another); FP8 adds a float32 scale per state (state_dtype.py);
    top_k: the teacher's k most likely token ids (int32) and their log-probabilities (bf16)."""

    hidden: int
    layers: int
    teacher: str = "final"
    top_k: int = 0
    state_dtype: str = "bfloat16"

    @property
    def groups(self) -> int:
        """States per token: the captured layers, and the final state when it is the teacher."""
        return self.layers + (self.teacher == "final")

    @property
    def state_columns(self) -> int:
        return self.groups * self.hidden

    @property
    def scale_columns(self) -> int:
        return self.groups if is_fp8(self.state_dtype) else 0

    @property
    def bytes_per_token(self) -> int:
        teacher = self.top_k * (I32 + BF16) if self.teacher == "top_k" else 0
        states = self.state_columns * itemsize(self.state_dtype) + self.scale_columns * SCALE_BYTES
        return states + I32 + U8 + teacher  # + input_ids, loss_mask


@dataclass(frozen=True)
class Shard:
    index: int
    rows: tuple[int, ...]  # indices into the input rows, in the order they are stored
    tokens: int

    @property
    def name(self) -> str:
        return f"shard-{self.index:05d}.safetensors"


@dataclass(frozen=True)
class Plan:
    record: Record
    shards: tuple[Shard, ...]
    shard_bytes: int

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def total_bytes(self) -> int:
        return self.tokens * self.record.bytes_per_token

    def shard_size(self, shard: Shard) -> int:
        """Data bytes of a shard (its safetensors header adds a few hundred)."""
        return shard.tokens * self.record.bytes_per_token

    def for_rank(self, rank: int, world: int) -> list[Shard]:
        return [self.shards[i] for i in assign(self.shards, world)[rank]]

    def summary(self) -> dict:
        return {"bytes_per_token": self.record.bytes_per_token, "tokens": self.tokens,
                "total_bytes": self.total_bytes, "shards": len(self.shards), "shard_bytes": self.shard_bytes}


def plan(lengths: list[int], record: Record, shard_bytes: int) -> Plan:
    """Rows sorted by length (ties by position: batches then pad little), cut into shards
    of at most `shard_bytes` each; a row larger than that is a shard of its own."""
    if not lengths:
        raise PlanError("extract: the tokens file has no rows")
    per_shard = max(1, shard_bytes // record.bytes_per_token)
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    shards, cur, tokens = [], [], 0
    for i in order:
        if cur and tokens + lengths[i] > per_shard:
            shards.append(Shard(len(shards), tuple(cur), tokens))
            cur, tokens = [], 0
        cur.append(i)
        tokens += lengths[i]
    shards.append(Shard(len(shards), tuple(cur), tokens))
    return Plan(record, tuple(shards), shard_bytes)


def assign(shards, world: int) -> list[list[int]]:
    """Shard indices per rank, balanced by tokens: largest shard first to the rank with the
    fewest tokens so far (ties to the lower rank), each rank's list in shard order."""
    load = [0] * world
    out: list[list[int]] = [[] for _ in range(world)]
    for s in sorted(shards, key=lambda s: (-s.tokens, s.index)):
        r = min(range(world), key=lambda r: (load[r], r))
        load[r] += s.tokens
        out[r].append(s.index)
    return [sorted(x) for x in out]


def batches(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """Consecutive runs of a shard's rows (already sorted by length) whose padded size,
    longest row x rows, stays within `batch_tokens`; positions into `lengths`."""
    out, cur, width = [], [], 0
    for i, n in enumerate(lengths):
        if cur and max(width, n) * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, n)
    if cur:
        out.append(cur)
    return out


def free_bytes(folder: Path) -> int:
    """Free space of the filesystem that will hold `folder` (its nearest existing parent)."""
    p = Path(folder).absolute()
    while not p.exists():
        p = p.parent
    return shutil.disk_usage(p).free


def check_space(needed: int, folder: Path, margin: float) -> int:
    """Refuse, naming the numbers, unless `needed` x (1 + margin) bytes are free where the
    shards go. Returns the free bytes."""
    free = free_bytes(folder)
    if needed * (1 + margin) > free:
        raise PlanError(f"extract: the plan needs {human(needed)} (+{margin:.0%} margin, extract.free_space_margin) "
                        f"for the remaining shards but {folder} has {human(free)} free; free space, point "
                        "extract.shard_dir at a larger filesystem, or store less (extract.teacher)")
    return free


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"
