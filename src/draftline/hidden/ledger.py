"""What is done: one append-only ledger per rank beside the shards.

A shard counts as done once its file has been renamed into place and then its line (name,
size, hash, rows) appended to its rank's ledger and fsynced. A SIGKILL between the two
leaves a finished file without a line: it is recomputed, so at most one shard per rank is
lost. A torn last line is skipped; a line whose file is missing or of another size is not
trusted. The ledgers together are the index: the merge reads them, not the shards.

A ledger belongs to one plan: `plan.json` records the fingerprint of everything that
decides the bytes (tokens file, target info, params, code), and a folder holding another
plan's shards is cleared before any work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..io import read_json, remove, write_json

PLAN = "plan.json"


def ledger_path(folder: Path, rank: int) -> Path:
    return folder / f"ledger-r{rank:03d}.jsonl"


def append(folder: Path, rank: int, entry: dict) -> None:
    path = ledger_path(folder, rank)
    # A line cut by a kill has no newline: start on a fresh line, or this entry joins it.
    fresh = False
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            fresh = f.read(1) != b"\n"
    with open(path, "a") as f:
        f.write(("\n" if fresh else "") + json.dumps(entry, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def done(folder: Path, names: dict[int, str]) -> dict[int, dict]:
    """Shard index -> its ledger entry, for the shards of `names` ({index: file name}) whose
    entry is whole and whose file is there at the recorded size. Read from every rank's
    ledger: a rerun may have another world size."""
    out: dict[int, dict] = {}
    for path in sorted(folder.glob("ledger-r*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                e = json.loads(line)
                i, name, size = int(e["shard"]), e["name"], int(e["bytes"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill
            f = folder / name
            if names.get(i) == name and f.is_file() and f.stat().st_size == size:
                out[i] = e
    return out


def sweep(folder: Path, name: str) -> None:
    """Before writing shard `name`: remove its temp files (only this rank writes it, so any
    temp is a dead process's) and a finished file that no ledger line vouches for."""
    for tmp in folder.glob(f".{name}.*.tmp"):
        remove(tmp)
    (folder / name).unlink(missing_ok=True)


def holds(folder: Path, fingerprint: str) -> bool:
    """Whether `folder` holds (part of) this very plan's work; reads only."""
    try:
        return read_json(folder / PLAN).get("fingerprint") == fingerprint
    except (OSError, ValueError):
        return False


def clear(folder: Path) -> None:
    """Remove every shard, temp, ledger and plan file from `folder`."""
    if folder.is_dir():
        for p in [*folder.glob("shard-*.safetensors"), *folder.glob(".shard-*.tmp"), *folder.glob("ledger-r*.jsonl"),
                  folder / PLAN]:
            remove(p)


def reset(folder: Path, fingerprint: str, summary: dict) -> None:
    """Make `folder` hold this plan: clear another plan's shards, ledgers and temps."""
    clear(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / PLAN, {"fingerprint": fingerprint, **summary})
