"""Each stage reads exactly the params keys it declares, and dvc.yaml reruns it on exactly those.

A stage's `PARAMS` (stages/<stage>.py) is the one declaration: the stage gets a view of
those keys and nothing else, and dvc.yaml's `params:` for the stage must list the same
keys, so a change to any key the stage reads reruns it and a change to any other does not.
"""

from __future__ import annotations

import importlib

import pytest
import yaml
from conftest import ROOT

from draftline.cli import STAGES
from draftline.config.drafter import DrafterParams
from draftline.config.params import load_params
from draftline.config.train import TrainParams
from draftline.config.view import Declared, UndeclaredKey


def dvc_params(stage: str) -> set[str]:
    """The keys dvc.yaml lists under the stage's `params:`; the whole file is `params.yaml`."""
    entries = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"][stage].get("params") or []
    keys = set()
    for e in entries:
        keys |= set(e) if isinstance(e, dict) else {e}
    return keys


def declared(stage: str) -> set[str]:
    params = importlib.import_module(STAGES[stage]).PARAMS
    return {params} if isinstance(params, str) else set(params.keys)


@pytest.mark.parametrize("stage", list(STAGES))
def test_declared_keys_are_the_stages_dvc_params(stage):
    have, want = dvc_params(stage), declared(stage)
    assert have == want, (f"stage {stage}: dvc.yaml params {sorted(have)} but stages/{stage}.py PARAMS "
                          f"{sorted(want)}: dvc.yaml misses {sorted(want - have)}, lists undeclared {sorted(have - want)}")


def test_check_tracks_the_whole_file():
    assert dvc_params("check") == {"params.yaml"}


def test_a_stage_reads_what_it_declares_and_nothing_else():
    view = Declared("train", ("drafter.head_dim", "train"), (DrafterParams, TrainParams)).load(ROOT / "params.yaml")
    assert view.train.lr == load_params(ROOT / "params.yaml").train.lr  # a section declared whole
    assert view.drafter.head_dim is None  # one key of a section
    with pytest.raises(UndeclaredKey, match=r"'drafter.num_layers' is read by stage train but not declared"):
        view.drafter.num_layers
    with pytest.raises(UndeclaredKey, match=r"'extract' is read by stage train"):
        view.extract
    with pytest.raises(UndeclaredKey, match=r"'drafter.model_dump'"):
        view.drafter.model_dump()  # reading the whole of a section reads its undeclared keys too


def test_an_undeclared_read_fails_the_stage_with_one_line(tmp_path):
    """The stage's own command: a read of a key the stage does not declare stops it, named."""
    from click.testing import CliRunner

    from draftline.cli import main
    from stages import tokenize

    real = tokenize.run
    try:
        tokenize.run = lambda params, *a: params.regenerate.max_new_tokens  # a planted undeclared read
        res = CliRunner().invoke(main, ["--params", str(ROOT / "params.yaml"), "tokenize"])
    finally:
        tokenize.run = real
    assert res.exit_code == 2
    assert res.output.strip() == ("error: params key 'regenerate' is read by stage tokenize but not declared: add "
                                  "it to PARAMS in stages/tokenize.py and to the stage's params in dvc.yaml")


def test_a_stage_validates_its_sections_and_names_the_key(tmp_path):
    bad = tmp_path / "params.yaml"
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["train"]["lr"] = "fast"
    bad.write_text(yaml.safe_dump(data))
    spec = Declared("train", ("train",), (TrainParams,))
    with pytest.raises(Exception, match=r"train\.lr: .*\(got 'fast'\)"):
        spec.load(bad)


def test_a_declaration_names_its_sections():
    with pytest.raises(ValueError, match="stage x: keys"):
        Declared("x", ("train", "drafter.head_dim"), (TrainParams,))


def test_the_library_never_imports_stages():
    """Only the entry point (draftline/cli.py) assembles the stages, and by name."""
    offenders = [p.relative_to(ROOT) for p in (ROOT / "src").rglob("*.py")
                 if any(line.lstrip().startswith(("import stages", "from stages")) for line in p.read_text().splitlines())]
    assert not offenders, offenders


def _reads(path) -> set[str]:
    """`params.<section>[.<key>]` chains in a module: the keys its code reads by name."""
    import re

    return {".".join(filter(None, m)) for m in re.findall(r"\bparams\.(\w+)(?:\.(\w+))?", path.read_text())}


@pytest.mark.parametrize("stage", [s for s in STAGES if s != "check"])
def test_every_key_a_stages_code_names_is_declared(stage):
    """Static twin of the view: a read on a code path no test runs (a server backend, online
    features) is still caught. Keys reached through a section object (`p = params.extract`)
    are left to the view at run time."""
    from test_dvc_deps import closure

    from draftline.config.view import covers

    keys = importlib.import_module(STAGES[stage]).PARAMS.keys
    heads = {k.split(".")[0] for k in keys}
    undeclared = set()
    for path in closure("draftline.cli", STAGES[stage]):
        if path.parent.name == "config":  # the views themselves (and their docstrings' examples)
            continue
        for key in _reads(ROOT / path):
            section = key.split(".")[0]
            if section in heads and not covers(keys, key) and "." in key:
                undeclared.add(f"{path}: params.{key}")
            elif section not in heads and section[0].islower() and _is_section(section):
                undeclared.add(f"{path}: params.{key}")
    assert not undeclared, f"stage {stage} reads undeclared keys: {sorted(undeclared)}"


def _is_section(name: str) -> bool:
    from draftline.config.params import Params

    return name in Params.model_fields
