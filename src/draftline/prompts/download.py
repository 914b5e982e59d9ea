"""Stage `download`: read every prompt source in params into one Parquet file.

    draftline download --out FILE --metrics FILE

Local sources must lie inside one of the stage's data deps in dvc.yaml (`--inputs`
defaults to them): editing a prompt file then reruns the stage, and a file outside them
stops it here, named, instead of going stale unnoticed. Any path can be a dep, inside the
repository or outside it (DVC hashes an outside file on every `dvc status`, but does not
version it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..cost import Cost
from ..io import write_json
from .schema import PROMPTS, ParquetOut
from .sources import SourceReport, source_frames

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.download import SourceParams


def local_file(src: SourceParams) -> Path | None:
    """The local file or folder a source reads, if any (a hub id is not one)."""
    if src.path is None or (src.kind == "hf" and not Path(src.path).exists()):
        return None
    return Path(src.path)


def check_inputs(sources: list[SourceParams], inputs: list[Path]) -> None:
    allowed = [p.resolve() for p in inputs]
    for i, src in enumerate(sources):
        path = local_file(src)
        if path is None:
            continue
        full = path.resolve()
        if not any(full == a or a in full.parents for a in allowed):
            raise ValueError(
                f"download.sources[{i}] '{src.name}': {path} is not among the stage's inputs "
                f"({', '.join(map(str, inputs)) or 'none'}); add `- {path}` (or its folder) to the download "
                f"stage's deps in dvc.yaml, so that editing it reruns the stage")


def run(params, inputs: list[Path], out: Path, metrics: Path) -> None:
    check_inputs(params.download.sources, inputs)
    cost, report = Cost(), {}
    with ParquetOut(out, PROMPTS) as writer:
        for src in params.download.sources:
            rep = SourceReport(src.name)
            for df in source_frames(src, rep):
                writer.write(df)
            report[src.name] = _report(src, rep)
    write_json(metrics, {"sources": report, "total": writer.rows, "cost": cost.report(writer.rows)})


def _report(src, rep: SourceReport) -> dict:
    line = f"download: {src.name}: {rep.rows_kept} prompts"
    if rep.skipped:
        line += f", skipped {sum(rep.skipped.values())} ({'; '.join(f'row {r}: {w}' for r, w in rep.examples)})"
    print(line)
    return {"role": src.role, "read": rep.rows_read, "kept": rep.rows_kept,
            "skipped": sum(rep.skipped.values()), "skipped_by_reason": rep.skipped,
            "skipped_examples": [f"row {r}: {why}" for r, why in rep.examples]}
