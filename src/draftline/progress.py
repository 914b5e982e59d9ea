"""One progress bar style for every long loop: count, rate and ETA on stderr."""

from __future__ import annotations

import sys

from tqdm import tqdm

_enabled = True


def configure(enabled: bool) -> None:
    """`draftline --no-progress` (or DRAFTLINE_NO_PROGRESS=1) turns every bar off."""
    global _enabled
    _enabled = enabled


def bar(total: int | None, desc: str, unit: str = "it") -> tqdm:
    # Under CI or a pipe, refresh rarely so logs stay readable but still show progress.
    quiet = not sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        dynamic_ncols=True,
        mininterval=10.0 if quiet else 0.5,
        disable=not _enabled,
        file=sys.stderr,
    )
