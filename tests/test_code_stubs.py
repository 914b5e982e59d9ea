"""The committed code-completion prompts are what the generator makes, and each is valid Python."""

import ast
import json
from pathlib import Path

from draftline.code_stubs import INSTRUCTION

SEED = Path(__file__).resolve().parents[1] / "data/seed/code_stubs.jsonl"


def test_committed_stubs_are_valid_function_stubs():
    rows = [json.loads(line) for line in SEED.open()]
    assert len(rows) >= 200
    names = set()
    for r in rows:
        assert r["category"] == "completion" and r["origin"].startswith("python-stdlib:")
        (msg,) = r["messages"]
        assert msg["role"] == "user" and msg["content"].startswith(INSTRUCTION) and msg["content"].endswith("```")
        code = msg["content"][len(INSTRUCTION):-3]
        fn = ast.parse(code).body[0]  # signature + docstring parse as a complete function
        assert isinstance(fn, ast.FunctionDef) and ast.get_docstring(fn)
        names.add(fn.name)
    assert len(names) == len(rows)  # no function twice
