"""The committed code-completion prompts are what the generator makes, and each is valid Python."""

import ast
import importlib.util
import json

from conftest import ROOT

SEED = ROOT / "data/seed/code_stubs.jsonl"
_spec = importlib.util.spec_from_file_location("code_stubs", ROOT / "scripts/code_stubs.py")
code_stubs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(code_stubs)
INSTRUCTION = code_stubs.INSTRUCTION


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
