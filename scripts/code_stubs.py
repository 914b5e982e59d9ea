"""Code-completion prompts from the Python standard library: signature + docstring.

A HumanEval-style request ("complete this function") makes a chat model restate the
signature and build on the docstring, so its answers copy from the prompt; one-line
"write a function that..." prompts teach a drafter nothing of that. The standard library
holds hundreds of documented, PSF-licensed functions, so we take prompts from there:
public module-level functions with a docstring of 60-700 characters, no decorators and at
least one argument. The file is generated once and committed (data/seed/code_stubs.jsonl),
so every machine trains on the same prompts whatever its Python:

    python -m draftline.code_stubs data/seed/code_stubs.jsonl
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
import textwrap
from pathlib import Path

MODULES = [
    "base64", "bisect", "calendar", "colorsys", "datetime", "decimal", "difflib", "email.utils", "filecmp",
    "fnmatch", "fractions", "functools", "gettext", "glob", "graphlib", "hashlib", "heapq", "html", "inspect",
    "ipaddress", "json.decoder", "keyword", "locale", "mimetypes", "netrc", "numbers", "operator", "os",
    "platform", "plistlib", "posixpath", "pprint", "pydoc", "quopri", "random", "re", "reprlib", "sched",
    "secrets", "shlex", "shutil", "smtplib", "statistics", "string", "tarfile", "tempfile", "textwrap",
    "tokenize", "typing", "urllib.parse", "uuid", "warnings", "wave", "zipfile",
]
INSTRUCTION = "Complete the following Python function.\n\n```python\n"


def stubs_of(module_name: str) -> list[dict]:
    try:
        source = inspect.getsource(importlib.import_module(module_name))
    except (ImportError, OSError, TypeError):
        return []
    lines = source.splitlines()
    out = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or node.decorator_list:
            continue
        doc = ast.get_docstring(node)
        if not doc or not 60 <= len(doc) <= 700 or not node.args.args:
            continue
        first_body = node.body[0].lineno
        header = "\n".join(lines[node.lineno - 1 : max(first_body - 1, node.lineno)]).rstrip()
        if not header.startswith("def ") or header.count("\n") > 3:
            continue
        stub = f'{header}\n    """{textwrap.indent(doc, "    ").strip()}\n    """\n'
        out.append({"category": "completion", "origin": f"python-stdlib:{module_name}.{node.name}",
                    "messages": [{"role": "user", "content": INSTRUCTION + stub + "```"}]})
    return out


def all_stubs() -> list[dict]:
    seen, out = set(), []
    for name in MODULES:
        for row in stubs_of(name):
            fn = row["origin"].rsplit(".", 1)[1]
            if fn not in seen:  # os.path and posixpath share functions: keep the first
                seen.add(fn)
                out.append(row)
    return out


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m draftline.code_stubs OUT.jsonl")
    rows = all_stubs()
    Path(argv[0]).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} stubs from {len(MODULES)} modules -> {argv[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
