"""Resumable answer store: shards keyed by a content hash of what produced each row.

A row's key covers the prompt, the sample index, the generation settings and the target
fingerprint, so a rerun skips exactly the rows already answered under the same settings
and never mixes in rows made under other ones. Shards are written whole (temp file +
rename) under names never reused, so a kill at any moment leaves only complete shards,
and a key found twice (a kill between writing the final file and clearing the shards)
is read once.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..io import set_aside, write_parquet

DAMAGED = "damaged"  # unreadable resume sources, set aside inside the work folder


def row_key(messages: list[dict], sample: int, settings: dict, target_fp: str) -> str:
    blob = json.dumps([messages, sample, settings, target_fp], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def target_fingerprint(model_dir: Path, compute_dtype: str | None = None) -> str:
    """The weights' hash; with the dtype an in-process target runs in, since a bf16 answer
    differs from a float32 one and must not be reused under the other."""
    h = hashlib.sha256()
    for f in sorted(model_dir.iterdir()):
        if f.is_file():
            h.update(f.name.encode())
            with f.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
    return h.hexdigest() + (f"/{compute_dtype}" if compute_dtype else "")


class ShardStore:
    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._seq = len(self.shards())

    def shards(self) -> list[Path]:
        return sorted(self.folder.glob("part-*.parquet"))

    def load(self, wanted: set[str], finished: list[Path] = ()) -> dict[str, dict]:
        """Rows already done whose key is still wanted: from shards and from the final
        files of an earlier completed run (so a rerun after a params change that does not
        touch generation regenerates nothing)."""
        done: dict[str, dict] = {}
        keys = pa.array(sorted(wanted), pa.string())
        for f in [*finished, *self.shards()]:
            if not f.exists():
                continue
            try:
                table = pq.read_table(f)
            except (pa.ArrowException, OSError) as err:
                # A damaged resume source (a truncated persisted output, a bad disk) would
                # otherwise fail every rerun: its rows are simply answered again.
                set_aside(f, self.folder / DAMAGED, str(err).splitlines()[0])
                continue
            if "key" not in table.column_names:
                continue
            for row in table.filter(pc.is_in(table["key"], value_set=keys)).to_pylist():
                done.setdefault(row["key"], row)
        return done

    def append(self, rows: list[dict]) -> Path | None:
        if not rows:
            return None
        self._seq += 1
        path = self.folder / f"part-{self._seq:06d}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
        write_parquet(path, rows)
        return path

    def clear(self) -> None:
        for f in self.shards():
            f.unlink()
        if not any(self.folder.iterdir()):
            self.folder.rmdir()
