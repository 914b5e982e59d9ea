"""The `draftline` command: one group, the stages in pipeline order, options that say what
each reads and writes, path defaults from dvc.yaml, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT

from draftline import paths
from draftline.cli import STAGES, TOOLS, main


def _invoke(*args, **kw):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kw)


def test_help_lists_the_stages_in_pipeline_order_one_line_each():
    out = _invoke("--help", terminal_width=80).output
    stage_block = out.split("Pipeline stages", 1)[1].split("Tools", 1)[0]
    lines = [line for line in stage_block.splitlines()[1:] if line.strip()]
    assert [line.split()[0] for line in lines] == list(STAGES)  # one line each: no continuation lines
    for var in ("DRAFTLINE_PARAMS", "DRAFTLINE_THREADS", "DRAFTLINE_DEVICE", "DRAFTLINE_NO_PROGRESS",
                "DRAFTLINE_DEBUG"):
        assert var in out
    assert all(t in out.split("Tools", 1)[1] for t in TOOLS)


@pytest.mark.parametrize("name", list(STAGES))
def test_every_stage_says_what_it_reads_and_writes(name):
    out = _invoke(name, "--help", terminal_width=200).output
    assert "Writes:" in out and "Params:" in out
    assert "Reads:" in out or name == "target"  # the target stage reads only params and the package's GGUF
    path_options = re.findall(r"^\s+(--[\w-]+) PATH", out, re.M)
    declared = re.findall(r"\(paths\.\w+ in dvc\.yaml\)|\(download's deps in dvc\.yaml\)", out)
    assert (path_options or name == "check") and len(declared) == len(path_options)


@pytest.mark.parametrize("name", list(TOOLS))
def test_every_tool_has_help(name):
    assert _invoke(name, "--help").exit_code == 0


def test_path_defaults_are_dvc_yaml_declarations(tmp_path):
    declared = paths.all_declared(ROOT / "dvc.yaml")
    assert declared["tokens"] == Path("data/tokens/train.parquet")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"vars": [{"paths": {"tokens": "elsewhere/t.parquet"}}]}))
    assert paths.declared("tokens", tmp_path / "dvc.yaml") == Path("elsewhere/t.parquet")
    with pytest.raises(paths.PathsError, match="has no 'hidden'"):
        paths.declared("hidden", tmp_path / "dvc.yaml")


def _params(tmp_path: Path, sources: list[dict]) -> Path:
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["download"]["sources"] = sources
    out = tmp_path / "params.yaml"
    out.write_text(yaml.safe_dump(p))
    return out


def test_download_refuses_a_prompt_file_outside_its_inputs(tmp_path):
    (tmp_path / "seed").mkdir()
    (tmp_path / "extra").mkdir()
    for d in ("seed", "extra"):
        (tmp_path / d / "p.jsonl").write_text(json.dumps({"prompt": f"Hello from {d}"}) + "\n")
    params = _params(tmp_path, [{"name": "ok", "kind": "local", "path": str(tmp_path / "seed/p.jsonl")},
                                {"name": "extra", "kind": "local", "path": str(tmp_path / "extra/p.jsonl")}])
    common = ["--params", str(params), "download", "--inputs", str(tmp_path / "seed"),
              "--out", str(tmp_path / "prompts.parquet"), "--metrics", str(tmp_path / "m.json")]
    result = _invoke(*common)
    assert result.exit_code == 2
    assert "download.sources[1] 'extra'" in result.output and "to the download stage's deps in dvc.yaml" in result.output
    assert not (tmp_path / "prompts.parquet").exists()
    ok = _invoke(*common, "--inputs", str(tmp_path / "extra/p.jsonl"))
    assert ok.exit_code == 0, ok.output
    assert json.loads((tmp_path / "m.json").read_text())["total"] == 2


def test_a_bad_key_is_one_line_and_exit_2(tmp_path):
    """A stage validates the sections it reads before any work; the check stage, the whole file."""
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["mix"]["learning_rate"] = 0.1
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    result = _invoke("--params", str(tmp_path / "params.yaml"), "mix", "--prompts", str(tmp_path / "none.parquet"))
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {tmp_path / 'params.yaml'}: unknown key 'mix.learning_rate'"


def test_preset_prints_validated_flags():
    out = _invoke("--params", str(ROOT / "params.yaml"), "preset", str(ROOT / "presets/large.yaml")).output
    assert out.startswith("-S ") and "regenerate.samples_per_prompt=3" in out


def test_readme_results_match_the_committed_metrics(monkeypatch, tmp_path):
    """The README's results block is generated (`make results`), never typed by hand. It is
    held against the metrics git has at HEAD, not the workspace's: a local `make all`
    rewrites those with this machine's timings, and `make test` after it must still pass."""
    import subprocess

    from draftline import paths

    monkeypatch.chdir(ROOT)
    args = ["results", "--check"]
    for stage in ("benchmark", "train", "regenerate", "extract", "tokenize"):
        committed = paths.declared(f"{stage}_metrics")
        shown = subprocess.run(["git", "show", f"HEAD:{committed}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode:
            pytest.skip(f"{committed}: not in git at HEAD ({shown.stderr.strip()})")
        (tmp_path / committed.name).write_text(shown.stdout)
        args += [f"--{stage}", str(tmp_path / committed.name)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output


def test_any_edit_to_params_is_validated_by_the_check_stage(tmp_path):
    """The check stage tracks the whole params file: a key no stage reads is still caught."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["drafter"]["block_sise"] = 8
    params["trian"] = {"lr": 0.1}
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(params))
    res = CliRunner().invoke(main, ["--params", str(bad), "check"])
    assert res.exit_code == 2
    assert "unknown key 'drafter.block_sise'" in res.output and "unknown key 'trian'" in res.output
    ok = CliRunner().invoke(main, ["check"])
    assert ok.exit_code == 0 and "settings valid" in ok.output
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["check"]
    assert stage["params"] == [{"params.yaml": None}]  # the whole file, not some keys


def _run(stage) -> int:
    from draftline.command import Settings, run_stage
    from draftline.config.params import load_params

    with pytest.raises(SystemExit) as exit_:
        run_stage(Settings(params=ROOT / "params.yaml"), load_params, stage, torch_threads=False)
    return exit_.value.code


def test_ctrl_c_and_a_full_disk_are_one_line(capsys):
    def interrupted(params):
        raise KeyboardInterrupt

    def disk_full(params):
        with open("/dev/full", "w") as f:  # the kernel's always-full device: a real ENOSPC
            f.write("x" * 65536)
            f.flush()

    assert _run(interrupted) == 130
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: interrupted (Ctrl-C): finished work is kept")
    assert _run(disk_full) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: disk full") and "finished work is kept" in err


def test_click_errors_read_like_the_stages(tmp_path):
    """An unknown option or a tool's refusal prints `error: ...` as a stage's failure does,
    not click's `Error: ...`; a usage error keeps click's usage line and hint above it."""
    bad = _invoke("train", "--no-such-option")
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines()[-1].startswith("error: No such option '--no-such-option'")
    assert "Error:" not in bad.output and bad.output.startswith("Usage: ")
    missing = _invoke("preset", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 1
    assert missing.output.strip() == f"error: {tmp_path / 'nope.yaml'}: no such preset; {tmp_path}/ has none"


def test_an_unknown_preset_lists_the_presets_there():
    res = _invoke("preset", str(ROOT / "presets/nope.yaml"))
    names = ", ".join(sorted(p.stem for p in (ROOT / "presets").glob("*.yaml")))
    assert res.exit_code == 1 and res.output.strip().endswith(f"presets/ has {names}")
