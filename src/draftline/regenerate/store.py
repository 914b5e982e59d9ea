"""Resumable answer store: shards keyed by a content hash of what produced each row.

A row's key covers the prompt, the sample index, the generation settings and the target
fingerprint, so a rerun skips exactly the rows already answered under the same settings
and never mixes in rows made under other ones.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq

from ..io import write_parquet


def row_key(messages: list[dict], sample: int, settings: dict, target_fp: str) -> str:
    blob = json.dumps([messages, sample, settings, target_fp], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def target_fingerprint(model_dir: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(model_dir.iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            with f.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
    return h.hexdigest()


class ShardStore:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def load(self, wanted: set[str]) -> dict[str, dict]:
        """Rows already done whose key is still wanted."""
        done = {}
        for f in sorted(self.folder.glob("part-*.parquet")):
            for row in pq.read_table(f).to_pylist():
                if row["key"] in wanted:
                    done[row["key"]] = row
        return done

    def append(self, rows: list[dict]) -> None:
        n = len(list(self.folder.glob("part-*.parquet")))
        write_parquet(self.folder / f"part-{n:06d}.parquet", rows)

    def clear(self) -> None:
        for f in self.folder.glob("part-*.parquet"):
            f.unlink()
        if not any(self.folder.iterdir()):
            self.folder.rmdir()
