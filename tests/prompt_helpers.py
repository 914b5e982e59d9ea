"""A prompt source read whole into rows, for tests on small sources; the download stage
itself streams frames (`draftline.prompts.sources.source_frames`)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from draftline.config.download import SourceParams
from draftline.prompts.sources import SourceReport, source_frames


def load_source(src: SourceParams, root: Path = Path(".")) -> tuple[list[dict], SourceReport]:
    """The whole source as rows, with the report of what was read, kept and skipped."""
    report = SourceReport(src.name)
    frames = list(source_frames(src, report, root))
    return (pl.concat(frames).to_dicts() if frames else []), report
