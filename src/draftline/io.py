"""Atomic file writes: every artifact appears whole or not at all.

A killed stage leaves at most a `*.tmp` file behind, never a truncated artifact that a
rerun would mistake for a finished one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it over `path` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        if tmp.is_dir():
            if path.exists():
                shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def write_parquet(path: str | Path, rows: list[dict] | pa.Table) -> None:
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_parquet(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found (run the stage that writes it first)")
    return pq.read_table(path).to_pylist()


def write_tsv(path: str | Path, header: list[str], rows: list[list]) -> None:
    with atomic_path(path) as tmp:
        with tmp.open("w") as f:
            f.write("\t".join(header) + "\n")
            for r in rows:
                f.write("\t".join(_cell(v) for v in r) + "\n")


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)
