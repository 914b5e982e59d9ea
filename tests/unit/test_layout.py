"""The house rules a newcomer relies on: paths spelled once, one set of defaults, no private
imports across modules, docs in their places."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import yaml
from conftest import ROOT

from draftline.config.params import Params

SRC = ROOT / "src" / "draftline"


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_stage_path_is_spelled_in_the_library():
    """Stage paths live in dvc.yaml's `paths`; the library gets them as options."""
    for path in _modules():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            assert not re.search(r"\b(data|logs)/", line), f"{path.relative_to(ROOT)}:{i}: {line.strip()}"


def _defaults(model, data: dict, prefix: str = ""):
    for key, value in data.items():
        field = model.model_fields[key]
        sub = field.annotation if isinstance(field.annotation, type) else None
        if isinstance(value, dict) and sub is not None and hasattr(sub, "model_fields"):
            yield from _defaults(sub, value, f"{prefix}{key}.")
        elif not field.is_required():
            yield f"{prefix}{key}", field.get_default(call_default_factory=True), value


def test_config_defaults_are_the_values_params_yaml_sets():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    differ = [(k, model, file) for k, model, file in _defaults(Params, params) if model != file]
    assert not differ, f"config.py default vs params.yaml: {differ}"


def test_the_defaults_check_can_fail():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["train"] = {**params["train"], "lr": params["train"]["lr"] * 2}
    assert any(k == "train.lr" and m != f for k, m, f in _defaults(Params, params))


def test_config_imports_nothing_else_from_the_project():
    """Each section's model imports only the config package's own modules, and the package's
    __init__.py nothing: a stage that reads one section depends on that section alone."""
    for path in sorted((SRC / "config").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                assert node.level <= 1 and path.name != "__init__.py", f"{path.name}: {ast.dump(node)}"
                assert not (node.module or "").startswith("draftline"), f"{path.name}: {ast.dump(node)}"
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("draftline") for a in node.names), f"{path.name}: {ast.dump(node)}"


def test_no_module_imports_another_modules_private_names():
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("draftline")):
                private = [a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"]
                assert not private, f"{path.relative_to(ROOT)} imports {private} from {node.module}"


def test_params_yaml_comments_point_to_decisions_and_hold_no_figures():
    decisions = (ROOT / "bench/RESULTS.md").read_text().split("\n## ", 2)[1]
    keys = set(re.findall(r"^\| `([\w.]+)` \|", decisions, re.M))
    for i, line in enumerate((ROOT / "params.yaml").read_text().splitlines(), 1):
        comment = line.split("#", 1)[1] if "#" in line else ""
        if re.match(r"\s*(- )?\{?\w+: ", comment):
            continue  # a commented-out setting, not prose
        assert not re.search(r"\d\.\d|\d+(\.\d+)?x\b|%", comment), f"params.yaml:{i}: a figure in {comment!r}"
        for key in re.findall(r"Decisions: ([\w.]+)", comment):
            assert "." not in key or key in keys, f"params.yaml:{i}: no decision row for {key}"


def test_results_open_with_the_decisions_table():
    text = (ROOT / "bench/RESULTS.md").read_text()
    first = text.split("\n## ", 2)
    assert first[1].startswith("Decisions\n") and "| setting | value | why | evidence |" in first[1]
    statuses = re.findall(r"^## .*\n\nStatus: (\w+)", text, re.M)
    assert statuses and set(statuses) <= {"adopted", "rejected", "superseded", "reference"}
    assert len(statuses) == text.count("\n## ") - 1  # every entry but the decisions table has one


def test_readme_is_short_and_its_layout_matches_the_tree():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 15_500
    tree = readme.split("## Layout", 1)[1].split("```", 2)[1]
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    dirs = {str(Path(*Path(f).parts[:i])) + "/" for f in tracked for i in range(1, len(Path(f).parts))}
    stack: list[tuple[int, str]] = []
    for line in tree.splitlines():
        m = re.match(r"^([│├└─ ]*)([\w./-]+/?)", line)
        if not m or not m.group(2):
            continue
        depth = len(m.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        full = (stack[-1][1] if stack else "") + m.group(2)
        assert full in tracked or full in dirs, f"README layout names {full}, which git does not track"
        if full.endswith("/"):
            stack.append((depth, full))
    named = set()
    stack = []
    for line in tree.splitlines():
        m = re.match(r"^([│├└─ ]*)([\w./-]+/?)", line)
        if m and m.group(2):
            while stack and stack[-1][0] >= len(m.group(1)):
                stack.pop()
            full = (stack[-1][1] if stack else "") + m.group(2)
            named.add(full)
            if full.endswith("/"):
                stack.append((len(m.group(1)), full))
    # every top-level file and folder git tracks, every module and package of the library
    top = {Path(f).parts[0] + ("/" if len(Path(f).parts) > 1 else "") for f in tracked}
    library = {str(p.relative_to(ROOT)) + ("/" if p.is_dir() else "") for p in SRC.iterdir()
               if p.suffix == ".py" or (p / "__init__.py").exists()}
    stages = {f"stages/{p.name}" for p in (ROOT / "stages").glob("*.py") if p.name != "__init__.py"}
    unlisted = {"README.md", ".gitignore", ".dvcignore", "src/draftline/__init__.py", "src/draftline/__main__.py"}
    named |= {n.split("/")[0] + "/" for n in named if "/" in n}  # `data/seed/` names data/
    missing = sorted((top | library | stages) - named - unlisted)
    assert not missing, f"README layout misses {missing}"
