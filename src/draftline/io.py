"""Atomic file writes: every artifact appears whole or not at all.

A killed stage leaves at most a `*.tmp` file or folder behind, never a truncated artifact
that a rerun would mistake for a finished one; the next write beside it removes it once
the process that made it is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq


_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<host>[^.]+)-(?P<pid>\d+)\.tmp$")


def _host() -> str:
    # The host is part of a temp name: on a shared filesystem another machine's live
    # process has a pid that means nothing here, and its temp must not be swept.
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname()) or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)


def temp_beside(path: str | Path) -> Path:
    """A temp name beside `path` for this process, after removing the temps that dead
    processes on this host left for the same path (a SIGKILL runs no cleanup)."""
    path = Path(path)
    host = _host()
    if path.parent.is_dir():
        for old in path.parent.glob(f".{_glob_escape(path.name)}.*.tmp"):
            m = _TEMP.match(old.name)
            if m and m["name"] == path.name and m["host"] == host and not _alive(int(m["pid"])):
                remove(old)
    return path.with_name(f".{path.name}.{host}-{os.getpid()}.tmp")


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; rename it over `path` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path)
    try:
        yield tmp
        if tmp.is_dir():
            if path.exists():
                shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            remove(tmp)


def set_aside(path: Path, folder: Path, why: str) -> Path:
    """Move an unreadable file into `folder` under a new name, and say so: the stage goes
    on from what it can read instead of failing on the same file at every rerun, and the
    bytes stay for a post-mortem. `folder` is never a stage output (DVC would cache it)."""
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.damaged"
    shutil.move(str(path), dest)
    print(f"warning: {path} is unreadable ({why}); set aside as {dest}, going on without it", flush=True)
    return dest


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
