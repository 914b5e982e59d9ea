"""A published drafter on the same harness: our export re-saved by z-lab's own code in z-lab's
published format benchmarks to the same tokens and tau as the export, its outputs go to
`--out-dir` (nothing into its folder, the pipeline's outputs untouched), and a drafter made
for another target is refused in one line naming the key."""

import contextlib
import json
import shutil
from pathlib import Path

import dflash.model as zlab
import pytest
import torch
import yaml
from click.testing import CliRunner
from conftest import ROOT
from extract_helpers import extract_in_process

from draftline import paths
from draftline.cli import main
from draftline.config.drafter import DrafterParams
from draftline.config.regenerate import RegenerateParams
from draftline.config.target import TargetParams
from draftline.config.train import TrainParams
from draftline.drafter.model import build_drafter, drafter_config, mask_token_id, save_drafter
from draftline.doctor.overfit import overfit
from draftline.hidden.reader import load_sequences
from draftline.io import read_json, read_parquet, write_parquet
from draftline.regenerate.drive import converse
from draftline.regenerate.hf_backend import HFBackend
from draftline.sequences.loss_mask import encode
from draftline.target.info import describe

PROMPTS = ["Write a Python function that adds two numbers.", "What is the capital of France?",
           "List three colors.", "Write a haiku about rain."]
# The pipeline's own outputs, which benchmarking a published drafter must leave alone.
PIPELINE_OUTPUTS = ("bench_results", "benchmark_metrics", "acceptance_plot", "acceptance_position_plot")


@pytest.fixture(scope="module")
def project(tmp_path_factory, target_dir, target_model, tokenizer):
    """A project folder: dvc.yaml (the paths), params.yaml (a small benchmark), the target's
    info, the prompts as eval set, and the pipeline's drafter at data/drafter,
    overfit on the target's own answers to them (so its drafts are mostly accepted)."""
    root = tmp_path_factory.mktemp("published")
    shutil.copy(ROOT / "dvc.yaml", root / "dvc.yaml")
    declared = {k: root / v for k, v in paths.all_declared(root / "dvc.yaml").items()}
    dp = DrafterParams(num_layers=1, block_size=4, target_layer_ids=None)
    info = describe(target_dir, TargetParams(), dp, {"source": "embedded"})
    declared["target_info"].parent.mkdir(parents=True)
    declared["target_info"].write_text(json.dumps(info))
    write_parquet(declared["mix_eval"], [{"source": "chat", "id": f"p{i}", "messages": [
        {"role": "user", "content": p}]} for i, p in enumerate(PROMPTS)])
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["benchmark"] = {**params["benchmark"], "prompts_per_source": len(PROMPTS), "max_new_tokens": 24,
                           "baselines": [], "tree_budgets": [], "temperatures": [0.0]}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    backend = HFBackend(target_model, tokenizer, RegenerateParams(max_new_tokens=32), [tokenizer.eos_token_id])
    rows = []
    for i, (conv, answers) in enumerate(converse(backend, [[{"role": "user", "content": p}] for p in PROMPTS],
                                                 [0] * len(PROMPTS))):
        e = encode(tokenizer, conv, [a.finish_reason for a in answers], 256)
        rows.append({"id": f"r{i}", "split": "train", "input_ids": e.input_ids, "loss_mask": e.loss_mask})
    layers = info["target_layer_ids"]
    extract_in_process(target_model, rows, layers, root / "hidden", 4096, tokenizer.eos_token_id)
    mask_id = mask_token_id(tokenizer, dp.mask_token, target_model.config.vocab_size)
    drafter = build_drafter(drafter_config(target_model.config, dp, layers, mask_id), 0)
    # Overfit on these answers (the doctor's loop: every anchor, until it drafts them all), so
    # the benchmark of the same prompts accepts most drafts and both runs have much to compare.
    overfit(drafter, load_sequences(root / "hidden"), target_model.get_input_embeddings().weight,
            target_model.get_output_embeddings().weight, dp, TrainParams(), mask_id, torch.device("cpu"), 1e-3, 150)
    save_drafter(drafter, declared["drafter"])
    return root, declared


@pytest.fixture(scope="module")
def published(project, tmp_path_factory):
    """Our export loaded and saved by z-lab's DFlashDraftModel, its config.json cut to the keys
    z-lab publishes (top-level block_size and num_target_layers; dflash_config holds only
    mask_token_id and target_layer_ids)."""
    _, declared = project
    folder = tmp_path_factory.mktemp("hub") / "Some-DFlash-b4"
    zlab.DFlashDraftModel.from_pretrained(str(declared["drafter"])).save_pretrained(str(folder))
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("target_hidden_size")
    cfg["dflash_config"] = {k: cfg["dflash_config"][k] for k in ("mask_token_id", "target_layer_ids")}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


def _benchmark(root: Path, target_dir: Path, *args: str):
    with contextlib.chdir(root):  # the pipeline's paths are this project's
        return CliRunner().invoke(main, ["--params", "params.yaml", "benchmark", "--model", str(target_dir), *args])


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_published_format_benchmarks_like_our_export(project, published, target_dir, tmp_path):
    root, declared = project
    ours = _benchmark(root, target_dir)  # as dvc.yaml runs it: the pipeline's drafter and outputs
    assert ours.exit_code == 0, ours.output
    pipeline = {k: declared[k].read_bytes() for k in PIPELINE_OUTPUTS}
    before = _snapshot(published)

    theirs = _benchmark(root, target_dir, "--drafter", str(published), "--out-dir", str(tmp_path / "out"))
    assert theirs.exit_code == 0, theirs.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "acceptance.tsv", "acceptance_by_position.tsv", "metrics.json", "results.parquet"]
    assert _snapshot(published) == before  # no card, nothing else written into someone else's folder
    assert {k: declared[k].read_bytes() for k in PIPELINE_OUTPUTS} == pipeline

    def decoded(results: Path) -> list:
        return [(r["id"], r["method"], r["tokens"], r["acceptance"], r.get("equal_to_target"))
                for r in read_parquet(results)]

    assert decoded(tmp_path / "out/results.parquet") == decoded(declared["bench_results"])
    a, b = read_json(declared["benchmark_metrics"]), read_json(tmp_path / "out/metrics.json")
    assert b["tau"] == a["tau"] > 1.2 and b["mismatches"] == 0
    assert (tmp_path / "out/acceptance.tsv").read_text() == declared["acceptance_plot"].read_text()
    # Which drafter each is: the folder's name and its weights' short sha256.
    assert a["drafter"]["folder"] == "drafter" and b["drafter"]["folder"] == "Some-DFlash-b4"
    assert all(len(m["drafter"]["weights_sha256"]) == 12 for m in (a, b))


EDITS = [("num_target_layers", 36), ("hidden_size", 4096), ("vocab_size", 151936),
         ("dflash_config.target_layer_ids", [15, 30]), ("dflash_config.mask_token_id", 49152),
         ("architectures", ["Qwen3ForCausalLM"])]


@pytest.mark.parametrize("key,value", EDITS, ids=[k for k, _ in EDITS])
def test_a_drafter_for_another_target_is_refused_in_one_line(project, published, target_dir, tmp_path, key, value):
    root, _ = project
    folder = tmp_path / "other"
    shutil.copytree(published, folder)
    cfg = json.loads((folder / "config.json").read_text())
    *parents, last = key.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[last] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    res = _benchmark(root, target_dir, "--drafter", str(folder), "--out-dir", str(tmp_path / "out"))
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {folder}/config.json: {key} "), res.output
    assert not (tmp_path / "out").exists()


def test_outputs_of_a_drafter_not_the_pipelines_go_elsewhere(project, published, target_dir, tmp_path):
    """Refused before anything loads: the pipeline's outputs as defaults, --out-dir beside
    an output option."""
    root, declared = project
    pipeline = {k: declared[k].read_bytes() for k in PIPELINE_OUTPUTS if declared[k].exists()}
    some = ["--results", str(tmp_path / "r.parquet"), "--metrics", str(tmp_path / "m.json")]
    cases = [([], "its --results would overwrite the pipeline's: give --out-dir DIR"),
             (some, "its --histogram-plot would overwrite the pipeline's"),
             (["--out-dir", str(tmp_path / "o"), "--metrics", "m.json"], "--out-dir replaces --metrics")]
    for args, message in cases:
        res = _benchmark(root, target_dir, "--drafter", str(published), *args)
        assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not (published / "README.md").exists() and not list(tmp_path.iterdir())
    assert {k: declared[k].read_bytes() for k in PIPELINE_OUTPUTS if declared[k].exists()} == pipeline
