"""Which code a run came from: the checked-out commit and the day, which the benchmark
records in its metrics so that the README's results, generated from the committed metrics,
name the run they came from (results.py)."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone


def checkout() -> dict:
    """{"commit": HEAD's short sha, or None outside a git checkout, "date": today (UTC)}."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True)
        commit = done.stdout.strip() if done.returncode == 0 else None
    except OSError:  # no git on this machine: the run is still valid, only unnamed
        commit = None
    return {"commit": commit, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d")}
