"""The prompt schema as frames: the Arrow schema of `download`'s and `mix`'s Parquet files,
the prompt text as a polars expression, and a Parquet writer that takes a frame at a time.

The files' schema is fixed here, not inferred from the data: the same rows always give
the same bytes, whatever polars' own string types are.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..io import temp_beside

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
PROMPTS = pa.schema([("id", pa.string()), ("source", pa.string()), ("category", pa.string()),
                     ("role", pa.string()), ("messages", pa.list_(MESSAGE))])
MIXED = PROMPTS.append(pa.field("split", pa.string()))
MESSAGES = pl.List(pl.Struct({"role": pl.String, "content": pl.String}))


def user_text(messages: str = "messages") -> pl.Expr:
    """The user turns' contents joined by newlines: what dedupe, decontamination and the
    category rule read."""
    return (pl.col(messages).list.eval(pl.element().filter(pl.element().struct.field("role") == "user")
                                       .struct.field("content"))
            .list.join("\n"))


def read(path: str | Path, columns: list[str] | None = None) -> pl.DataFrame:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found (run the stage that writes it first)")
    return pl.read_parquet(path, columns=columns)


def frame(rows: list[dict], schema: pa.Schema = PROMPTS) -> pl.DataFrame:
    """Rows (dicts) as a frame of the schema."""
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=schema))


def table(df: pl.DataFrame, schema: pa.Schema, rows: int = 4096) -> pa.Table:
    """The frame as an Arrow table of the schema. Exported once, then cast `rows` rows at a
    time, each slice compacted first: the schema's strings have 32-bit offsets, which one
    column of long prompts would overflow, and casting a sliced list column would convert
    its whole child array every time."""
    whole = df.select(schema.names).to_arrow()
    parts = [_compact(whole.slice(lo, rows)).cast(schema) for lo in range(0, whole.num_rows, rows)]
    return pa.concat_tables(parts) if parts else whole.cast(schema)


def _compact(t: pa.Table) -> pa.Table:
    return pa.table([pa.concat_arrays(c.chunks) for c in t.columns], names=t.column_names)


class ParquetOut:
    """with ParquetOut(path, schema) as out: out.write(frame)... -- rows in row groups of
    `group_rows` (the last one smaller), whatever the frames' sizes, so the file's bytes
    depend on the rows alone and memory on the group, not the file. Up to `group_rows`
    rows this is the layout `io.write_parquet` gives the same rows. Written to a temp file
    beside `path` and renamed over it on success only."""

    def __init__(self, path: str | Path, schema: pa.Schema, group_rows: int = 1 << 16):
        self.path, self.schema, self.group_rows = Path(path), schema, group_rows
        self.rows = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def __enter__(self) -> "ParquetOut":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temp_beside(self.path)
        self._w = pq.ParquetWriter(self.tmp, self.schema)
        return self

    def write(self, df: pl.DataFrame) -> None:
        if df.height:
            self._pending.append(table(df, self.schema))
            self._pending_rows += df.height
            self.rows += df.height
        while self._pending_rows >= self.group_rows:
            rows = pa.concat_tables(self._pending)
            self._w.write_table(rows.slice(0, self.group_rows), row_group_size=self.group_rows)
            rest = rows.slice(self.group_rows)
            self._pending, self._pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def __exit__(self, kind, err, tb) -> None:
        try:
            if kind is None and self._pending:
                self._w.write_table(pa.concat_tables(self._pending), row_group_size=self.group_rows)
            self._w.close()
            if kind is None:
                self.tmp.replace(self.path)
        finally:
            self.tmp.unlink(missing_ok=True)


def write(path: str | Path, df: pl.DataFrame, schema: pa.Schema) -> None:
    """One frame as one file (ParquetOut's row groups)."""
    with ParquetOut(path, schema) as out:
        out.write(df)
