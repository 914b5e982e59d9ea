"""Stage `download`: read every prompt source in params into one Parquet file.

    python -m stages.download    # writes data/raw/prompts.parquet, data/metrics/download.json
"""

from pathlib import Path

from draftline.io import write_json, write_parquet
from draftline.sources import load_source

from ._run import main

OUT = Path("data/raw/prompts.parquet")
METRICS = Path("data/metrics/download.json")


def run(params) -> None:
    rows, report = [], {}
    for src in params.download.sources:
        got, rep = load_source(src)
        rows.extend(got)
        report[src.name] = {"role": src.role, "read": rep.rows_read, "kept": rep.rows_kept,
                            "skipped": sum(rep.skipped.values()), "skipped_by_reason": rep.skipped,
                            "skipped_examples": [f"row {r}: {why}" for r, why in rep.examples]}
        line = f"download: {src.name}: {rep.rows_kept} prompts"
        if rep.skipped:
            line += f", skipped {sum(rep.skipped.values())} ({'; '.join(f'row {r}: {w}' for r, w in rep.examples)})"
        print(line)
    write_parquet(OUT, rows)
    write_json(METRICS, {"sources": report, "total": len(rows)})


if __name__ == "__main__":
    main(run)
