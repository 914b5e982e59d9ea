"""Shared entry-point plumbing: validate params first, print errors without tracebacks."""

from __future__ import annotations

import os
import signal
import sys
from typing import Callable

import torch

from draftline.config import Params, ParamsError, load_params


def _terminate(signum, frame):
    # SIGTERM (a scheduler, `kill`) unwinds like Ctrl-C: finally blocks stop launched
    # servers and remove temp files; finished shards stay for the rerun.
    raise SystemExit(128 + signum)


def main(stage: Callable[[Params], None], params_path: str = "params.yaml") -> None:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        params = load_params(os.environ.get("DRAFTLINE_PARAMS", params_path))
        threads = os.environ.get("DRAFTLINE_THREADS")
        torch.set_num_threads(int(threads) if threads else max(1, os.cpu_count() or 1))
        stage(params)
    except (ParamsError, FileNotFoundError, ValueError, RuntimeError) as err:
        # Expected failures (bad params, missing input, unreachable server): one clear
        # message naming the key/file/URL, non-zero exit, nothing half-written.
        print(f"error: {err}", file=sys.stderr)
        if os.environ.get("DRAFTLINE_DEBUG"):
            raise
        sys.exit(2)
