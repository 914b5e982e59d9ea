"""dvc.yaml's deps are exactly each stage's code: its import closure inside stages/ and
src/draftline.

A stage runs `draftline <stage>`: cli.py, then stages/<stage>.py, then everything they
import (function-level imports included, parent packages' __init__.py included). A module
missing from the stage's deps means editing it reruns nothing; a listed module outside the
closure means editing it reruns the stage for nothing. A folder dep must be used whole.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from draftline.cli import STAGES

SRC = ROOT / "src"
PKG = SRC / "draftline"


def _root(name: str) -> Path:
    return ROOT if name.split(".")[0] == "stages" else SRC


def _module_file(name: str) -> Path | None:
    base = _root(name) / Path(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.exists():
            return p
    return None


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _run_nodes(tree: ast.AST):
    """Every node that runs: all of them but the body of `if TYPE_CHECKING:` (annotations
    only, never imported at run time)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_run_nodes(child)])
            continue
        yield node
        yield from _run_nodes(node)


def _imports(path: Path) -> set[str]:
    """Project modules `path` imports when it runs, anywhere in it."""
    here = ".".join(path.relative_to(ROOT if path.is_relative_to(ROOT / "stages") else SRC).with_suffix("").parts)
    package = here.rsplit(".", 1)[0] if path.name != "__init__.py" else here.removesuffix(".__init__")
    out = set()
    for node in _run_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            # `from pkg import sub` imports the submodule when there is one
            names = [mod] + [f"{mod}.{a.name}" for a in node.names if _module_file(f"{mod}.{a.name}")]
        else:
            continue
        out |= {n for n in names if n and n.split(".")[0] in ("draftline", "stages") and _module_file(n)}
    return out


def closure(*modules: str) -> set[Path]:
    todo, seen = list(modules), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += _parents(name) + sorted(_imports(_module_file(name)))
    return {_module_file(n).relative_to(ROOT) for n in seen}


def dvc_stages() -> dict:
    text = (ROOT / "dvc.yaml").read_text()
    data = yaml.safe_load(text)
    paths = next(v["paths"] for v in data["vars"] if "paths" in v)
    resolved = re.sub(r"\$\{paths\.(\w+)\}", lambda m: paths[m.group(1)], text)
    return yaml.safe_load(resolved)["stages"]


def code_deps(stage: dict) -> set[Path]:
    """The stage's deps under src/, folders expanded to their modules."""
    out = set()
    for d in stage["deps"]:
        p = Path(d)
        if p.parts[0] not in ("src", "stages"):
            continue
        if (ROOT / p).is_dir():
            folder = {f.relative_to(ROOT) for f in (ROOT / p).rglob("*.py")}
            assert folder, f"{p}: an empty folder dep"
            out |= folder
        else:
            out.add(p)
    return out


def folder_deps(stage: dict) -> list[Path]:
    return [Path(d) for d in stage["deps"] if Path(d).parts[0] in ("src", "stages") and (ROOT / d).is_dir()]


@pytest.mark.parametrize("name", list(STAGES))
def test_stage_deps_are_its_import_closure(name):
    stage = dvc_stages()[name]
    want = closure("draftline.cli", STAGES[name])
    have = code_deps(stage)
    assert not want - have, f"stage {name}: dvc.yaml misses {sorted(map(str, want - have))}"
    assert not have - want, f"stage {name}: dvc.yaml lists code it never imports {sorted(map(str, have - want))}"
    for folder in folder_deps(stage):
        unused = {f.relative_to(ROOT) for f in (ROOT / folder).rglob("*.py")} - want
        assert not unused, f"stage {name}: folder dep {folder} but {sorted(map(str, unused))} unused"


def test_every_stage_runs_its_own_command():
    stages = dvc_stages()
    assert list(stages) == list(STAGES)  # dvc.yaml order is the pipeline order `draftline --help` shows
    for name, stage in stages.items():
        assert stage["cmd"].split()[:2] == ["draftline", name]


def test_closure_sees_a_function_level_import():
    """regenerate imports its OpenAI driver only for that backend; it is still code the stage runs."""
    assert Path("src/draftline/regenerate/openai_run.py") in closure("stages.regenerate")


def test_local_prompt_files_are_download_inputs_and_deps():
    """download's --inputs default to its data deps, and every local file params names
    lies in one of them (the stage refuses any other: tests/unit/test_cli.py)."""
    from draftline import paths

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    stage = dvc_stages()["download"]
    assert "--inputs" not in stage["cmd"]
    inputs = paths.stage_data_deps("download", ROOT / "dvc.yaml")
    assert inputs == [Path("data/seed")]
    for src in params["download"]["sources"]:
        if src.get("path") and (ROOT / src["path"]).exists():
            path = Path(src["path"])
            assert any(path == i or i in path.parents for i in inputs), src


def test_tokenize_reads_the_answers_regenerate_writes():
    from draftline.regenerate.stage import ANSWERS

    data = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    paths = next(v["paths"] for v in data["vars"] if "paths" in v)
    assert Path(paths["regen_answers"]) == Path(paths["regen"]) / ANSWERS


def test_drafter_files_declared_are_what_training_writes():
    from draftline.drafter.model import DRAFTER_FILES

    data = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    paths = next(v["paths"] for v in data["vars"] if "paths" in v)
    assert {Path(paths["drafter_config"]), Path(paths["drafter_weights"])} == {
        Path(paths["drafter"]) / f for f in DRAFTER_FILES}
    assert Path(paths["drafter_card"]).parent == Path(paths["drafter"])
