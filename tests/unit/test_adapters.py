"""Every known-source adapter on a fixture file written in that source's published schema."""

import pytest
from conftest import ROOT
from prompt_helpers import load_source

from draftline.config.download import SourceParams
from draftline.prompts.categories import by_rule

FIX = ROOT / "tests" / "fixtures" / "sources"


def _load(kind, fname, **kw):
    return load_source(SourceParams(name=kind, kind=kind, path=str(FIX / fname), **kw))


@pytest.mark.parametrize("kind,fname,expected", [
    # (first user message prefix, category) per kept row
    ("nemotron", "nemotron_v1.parquet", [("Write a Python function", "coding"), ("What is the integral", "math"),
                                         ("Why is the sky blue", "reasoning")]),
    ("nemotron", "nemotron_v2.parquet", [("日本の首都", "multilingual"), ("Explain entropy", "reasoning")]),
    ("infinity_instruct", "infinity_instruct_0625.jsonl", [("Implement quicksort", "coding"), ("请写一首", "multilingual"),
                                                         ("If all bloops", "reasoning")]),
    ("codealpaca", "codealpaca.jsonl", [("Create a function", "coding"), ("Write a SQL query", "coding")]),
    ("sharegpt", "sharegpt.jsonl", [("Summarize the plot", "multiturn"), ("How do I fix a segfault", "coding")]),
    ("ultrachat", "ultrachat_200k.jsonl", [("What are some tips", "chat"), ("Write a short story", "writing")]),
    ("magpie", "magpie_pro.jsonl", [("Solve for x", "math"), ("Fix this JavaScript", "coding"),
                                    ("Quelle est la capitale", "multilingual")]),
    ("opencodeinstruct", "opencodeinstruct.parquet", [("You are given a list", "coding")]),
    ("gsm8k", "gsm8k_main_train.jsonl", [("Natalia sold clips", "math")]),
    ("math", "hendrycks_math_algebra.jsonl", [("What is the value of", "math")]),
])
def test_adapter_maps_its_schema(kind, fname, expected):
    rows, rep = _load(kind, fname)
    got = [(next(m["content"] for m in r["messages"] if m["role"] == "user"), r["category"]) for r in rows]
    assert len(got) == len(expected)
    assert [(t[: len(p)], c) for (t, c), (p, _) in zip(got, expected)] == expected
    assert all(r["source"] == kind and r["role"] == "train" for r in rows)
    # assistant turns are never kept: the target answers again
    assert all(m["role"] in ("user", "system") for r in rows for m in r["messages"])


def test_nemotron_drops_its_thinking_switch_and_codealpaca_joins_input():
    rows, _ = _load("nemotron", "nemotron_v1.parquet")
    assert rows[1]["messages"] == [{"role": "user", "content": "What is the integral of x^2?"}]
    rows, _ = _load("codealpaca", "codealpaca.jsonl")
    assert rows[0]["messages"][0]["content"].endswith("\n\n[1, 2, 3, 4, 5]")


@pytest.mark.parametrize("kind,fname,row,reason", [
    ("nemotron", "nemotron_v1.parquet", 4, "input[0]: bad role/content"),  # content null
    ("codealpaca", "codealpaca.jsonl", 3, "field 'instruction' is not text"),  # wrong type
    ("sharegpt", "sharegpt.jsonl", 3, "no user message"),
    ("opencodeinstruct", "opencodeinstruct.parquet", 2, "missing field 'input'"),
    ("gsm8k", "gsm8k_main_train.jsonl", 2, "not valid UTF-8"),  # a Latin-1 line
])
def test_malformed_rows_are_counted_with_source_and_row(kind, fname, row, reason):
    rows, rep = _load(kind, fname)
    assert sum(rep.skipped.values()) == 1 and rep.rows_read == len(rows) + 1
    (n, why), = rep.examples
    assert n == row and why.startswith(reason) and rep.name == kind


def test_source_category_overrides_labels():
    rows, _ = _load("magpie", "magpie_pro.jsonl", category="chat")
    assert {r["category"] for r in rows} == {"chat"}


def test_max_rows_stops_reading():
    rows, rep = _load("magpie", "magpie_pro.jsonl", max_rows=1)
    assert len(rows) == 1 and rep.rows_read == 1


@pytest.mark.parametrize("text,cat", [
    ("def f(x): return x", "coding"), ("Solve 3x + 2 = 11", "math"), ("Write a poem about rain", "writing"),
    ("A riddle: what has keys but no locks?", "reasoning"), ("How are you today?", "chat"),
    ("Какая сегодня погода в Москве?", "multilingual"),
    ('Use these tools: {"tools": [{"name": "search"}]} to find the weather', "tool_use"),
])
def test_category_rule(text, cat):
    assert by_rule([{"role": "user", "content": text}]) == cat
