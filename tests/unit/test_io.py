"""Atomic writes, and the temps a killed process leaves: removed by the next write once
their process is gone, never while it lives or when another host made them."""

import os
import subprocess
import sys

from draftline.io import _host, temp_beside, write_json


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_dead_process_temp_is_swept_by_the_next_write(tmp_path):
    out = tmp_path / "hidden"
    host = _host()
    dead = tmp_path / f".hidden.{host}-{_dead_pid()}.tmp"  # as SIGKILL during extract leaves it
    (dead / "sub").mkdir(parents=True)
    (dead / "sub" / "shard-0.safetensors").write_bytes(b"x" * 100)
    live = tmp_path / f".hidden.{host}-{os.getppid()}.tmp"  # a running process's
    live.mkdir()
    remote = tmp_path / f".hidden.othermachine-{_dead_pid()}.tmp"  # another host's, on a shared disk
    remote.mkdir()
    other = tmp_path / f".hidden_other.{host}-{_dead_pid()}.tmp"  # another output's temp
    other.mkdir()

    tmp = temp_beside(out)
    assert tmp.name == f".hidden.{host}-{os.getpid()}.tmp"
    assert not dead.exists()
    assert live.exists() and remote.exists() and other.exists()


def test_atomic_write_leaves_no_temp(tmp_path):
    stale = tmp_path / f".m.json.{_host()}-{_dead_pid()}.tmp"
    stale.write_text("{half")
    write_json(tmp_path / "m.json", {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]
