"""The real pipeline: `dvc repro` in a temporary git repo on the smoke preset (presets/smoke.yaml)."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from pipeline_helpers import copy_code, run_command

from draftline.presets import merged

pytestmark = pytest.mark.slow

STAGES = ["check", "target", "download", "mix", "regenerate", "tokenize", "extract", "train", "benchmark", "card"]


def _ran(out: str) -> set[str]:
    return set(re.findall(r"Running stage '(\w+)'", out))


def _set(repo, section, key, value):
    p = yaml.safe_load((repo / "params.yaml").read_text())
    p.setdefault(section, {})[key] = value
    (repo / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("pipeline")
    pythonpath = copy_code(ROOT, repo)
    shutil.copytree(ROOT / "data/seed", repo / "data/seed")
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    shutil.copy(ROOT / "data" / ".gitignore", repo / "data" / ".gitignore")  # keeps data/train_state out of git
    # The users' smoke preset over the default params, merged as `make preset PRESET=smoke` does.
    params = merged(ROOT / "presets" / "smoke.yaml", ROOT / "params.yaml")
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_command("git init -q && dvc init -q", repo)
    shutil.copytree(ROOT / ".dvc/plots", repo / ".dvc/plots")  # the templates dvc.yaml's plots name
    run_command("git add -A && git commit -qm init", repo)
    # Stages import draftline from the copy under test, not the installed checkout.
    os.environ["PYTHONPATH"] = pythonpath
    first = run_command("dvc repro", repo)
    yield repo, first
    os.environ.pop("PYTHONPATH", None)


def test_full_run_produces_every_output(repo):
    repo, first = repo
    assert _ran(first.stdout) == set(STAGES)
    for f in ["data/target/model/model.safetensors", "data/target/info.json", "data/raw/prompts.parquet",
              "data/mix/train.parquet", "data/mix/eval.parquet", "data/regen/answers.parquet",
              "data/tokens/train.parquet", "data/hidden/index.json", "data/drafter/config.json",
              "data/drafter/model.safetensors", "data/drafter/README.md", "data/bench/results.parquet", "dvc.lock",
              "data/plots/mix.tsv", "data/train_live/metrics.json", "data/train_live/plots/metrics/train/loss.tsv",
              "data/plots/acceptance.tsv",
              "data/plots/acceptance_by_position.tsv", "data/train_live/plots/metrics/eval/tau_estimate.tsv",
              "data/plots/train_position_acc.tsv"]:
        assert (repo / f).exists(), f
    assert not (repo / "data/regen_work").exists()  # resume shards are cleared when done
    info = json.loads((repo / "data/target/info.json").read_text())
    assert info["num_hidden_layers"] == 30 and info["target_layer_ids"] == [15]
    index = json.loads((repo / "data/hidden/index.json").read_text())
    assert len(index["shards"]) >= 2  # shard_bytes=700000 (about 300 tokens) forces several shards
    assert list((repo / "data/train_state").glob("step-*.pt"))  # resume state, kept out of git and the cache
    train = json.loads((repo / "data/metrics/train.json").read_text())
    assert 0 <= train["padding_fraction"] < 0.5 and train["val_tau_estimate"] >= 1.0
    bench = json.loads((repo / "data/metrics/benchmark.json").read_text())
    # one HumanEval prompt, one MT-Bench prompt with both its turns
    assert bench["mismatches"] == 0 and bench["prompts"] == 2 and bench["requests"] == 3 and bench["tau"] >= 1.0
    for src in ("humaneval", "mtbench", "all"):
        entry = bench["greedy"][src]
        assert {"dflash", "untrained", "prompt_lookup", "tree_4", "target_tokens_per_second"} <= set(entry)
        assert len(entry["dflash"]["position_acceptance"]) == 3 and entry["dflash"]["speedup"] > 0
        assert 1 <= entry["tree_4"]["nodes_per_step"] <= 4 and 0 <= entry["tree_4"]["off_chain_steps"] <= 1
    assert bench["tau_tree_4"] == bench["greedy"]["all"]["tree_4"]["tau"] >= 1.0
    assert bench["greedy"]["mtbench"]["requests"] == 2
    card = (repo / "data/drafter/README.md").read_text()  # the drafter folder is ready to publish
    assert card.startswith("---\nlicense: apache-2.0\nbase_model: HuggingFaceTB/SmolLM2-135M-Instruct\n")
    assert "## Training data" in card and "## Training\n" in card and "## Target" in card
    assert f"{bench['greedy']['humaneval']['dflash']['tau']:.3f}" in card
    assert '"num_speculative_tokens": 3' in card and "--speculative-num-draft-tokens 4" in card
    metrics = run_command("dvc metrics show --json", repo).stdout
    assert "tau" in metrics and "train_loss" in metrics
    assert run_command("dvc status", repo).stdout.strip().endswith("Data and pipelines are up to date.")


def test_masked_tokens_decode_to_the_regenerated_answers(repo):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    repo, _ = repo
    tok = AutoTokenizer.from_pretrained(repo / "data/target/model")
    answers = {r["id"]: r for r in pq.read_table(repo / "data/regen/answers.parquet").to_pylist()}
    tokens = pq.read_table(repo / "data/tokens/train.parquet").to_pylist()
    assert len(tokens) == len(answers)
    for row in tokens:
        a = answers[row["id"]]
        masked = [t for t, m in zip(row["input_ids"], row["loss_mask"]) if m]
        want = "".join(m["content"] + ("<|im_end|>" if fr == "stop" else "")
                       for m, fr in zip([m for m in a["messages"] if m["role"] == "assistant"], a["finish_reason"]))
        assert tok.decode(masked) == want, row["id"]


def test_changing_train_lr_reruns_only_train_benchmark_and_card(repo):
    repo, _ = repo
    run_command("git add -A && git commit -qm first", repo)
    _set(repo, "train", "lr", 0.002)
    out = run_command("dvc repro", repo).stdout
    # check: any edit to params.yaml is validated; card: the card states the recipe
    assert _ran(out) == {"check", "train", "benchmark", "card"}
    # Comparing runs: tau per benchmark in `dvc metrics diff`, acceptance curves in `dvc plots diff`.
    diff = json.loads(run_command("dvc metrics diff HEAD --all --json", repo).stdout)
    keys = set(diff["data/metrics/benchmark.json"])
    assert {"greedy.humaneval.dflash.tau", "greedy.mtbench.dflash.tau"} <= keys
    plots = run_command("dvc plots diff HEAD --json", repo).stdout
    assert "acceptance_by_position.tsv" in plots


def test_changing_regenerate_reruns_from_regenerate_on(repo):
    repo, _ = repo
    _set(repo, "regenerate", "max_new_tokens", 20)
    out = run_command("dvc repro", repo).stdout
    assert _ran(out) == {"check", "regenerate", "tokenize", "extract", "train", "benchmark", "card"}


def test_unknown_key_stops_the_stage_with_its_name(repo):
    repo, _ = repo
    _set(repo, "train", "learning_rate", 0.1)
    p = run_command("dvc repro", repo, check=False)
    assert p.returncode != 0
    assert "unknown key 'train.learning_rate'" in p.stderr + p.stdout
    # nothing was lost: the last good drafter is still in the DVC cache
    p2 = yaml.safe_load((repo / "params.yaml").read_text())
    del p2["train"]["learning_rate"]
    (repo / "params.yaml").write_text(yaml.safe_dump(p2, sort_keys=False))
    run_command("dvc checkout train", repo)
    assert (repo / "data/drafter/model.safetensors").exists()


def _stale(repo) -> set[str]:
    out = json.loads(run_command("dvc status --json", repo).stdout)
    return set(out)


def test_editing_a_module_reruns_exactly_the_stages_that_import_it(repo):
    """dvc.yaml's deps are the import closures: a shared module touches every stage, a
    decoding module only the benchmark."""
    repo, _ = repo
    run_command("dvc repro", repo)  # whatever earlier tests left changed
    assert _stale(repo) == set()
    for module, stages in [("src/draftline/decode/tree.py", {"benchmark"}),
                           # the benchmark hooks the drafter's layers as extraction does
                           ("src/draftline/hidden/capture.py", {"extract", "train", "benchmark"}),
                           ("src/draftline/io.py", set(STAGES) - {"check"})]:
        path = repo / module
        original = path.read_text()
        path.write_text(original + "\n# an edit\n")
        try:
            assert _stale(repo) == stages, module
        finally:
            path.write_text(original)


# Each key -> the stages whose code reads it (besides check, which tracks the whole file).
KEY_READERS = [
    ("drafter.num_layers", 2, {"target", "train"}),
    ("drafter.target_layer_ids", [3], {"target", "train"}),
    ("drafter.block_size", 8, {"train"}),
    ("drafter.mask_token", 7, {"train"}),
    ("drafter.num_attention_heads", 4, {"train"}),
    ("drafter.num_key_value_heads", 1, {"train"}),
    ("drafter.head_dim", 32, {"train"}),
    ("drafter.intermediate_size", 256, {"train"}),
    ("drafter.layer_types", ["sliding_attention"], {"train"}),
    ("drafter.sliding_window", 16, {"train"}),
    ("drafter.arch", "dflash2", {"train"}),
    ("drafter.dflash2.selector_rank", 8, {"train"}),
    ("chat.thinking", "off", {"regenerate", "tokenize", "benchmark"}),
    ("extract.teacher", "top_k", {"extract"}),
    ("extract.dtype", "float32", {"extract", "train"}),
    ("extract.state_dtype", "float8_e4m3fn", {"extract", "train"}),  # online features round as stored
    ("train.features", "online", {"extract", "train", "card"}),  # the card states the recipe
    ("train.lr", 0.0123, {"train", "card"}),
    ("target.dtype", "bfloat16", {"target", "regenerate"}),
    ("target.trust_remote_code", True, {"target", "extract"}),  # vLLM's engine reads it
    ("regenerate.min_top1_agreement", 0.95, {"regenerate"}),
    ("benchmark.max_new_tokens", 8, {"benchmark"}),
    ("card.repo", "me/drafter", {"card"}),  # publishing reruns the card, not the decoding
    ("card.license", "mit", {"card"}),
]


def _set_key(repo, dotted: str, value) -> None:
    p = yaml.safe_load((repo / "params.yaml").read_text())
    *path, last = dotted.split(".")
    node = p
    for k in path:
        node = node.setdefault(k, {})
    node[last] = value
    (repo / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def test_editing_a_key_reruns_exactly_the_stages_that_read_it(repo):
    """dvc.yaml's params are each stage's declared keys (stages/<stage>.py PARAMS), and a
    stage reads no other (its params view refuses): `dvc status` names exactly the readers."""
    repo, _ = repo
    run_command("dvc repro", repo)
    original = (repo / "params.yaml").read_text()
    try:
        for key, value, stages in KEY_READERS:
            _set_key(repo, key, value)
            assert _stale(repo) == stages | {"check"}, key
            (repo / "params.yaml").write_text(original)
    finally:
        (repo / "params.yaml").write_text(original)


def _edit(path: Path, old: str, new: str) -> str:
    original = path.read_text()
    assert old in original
    path.write_text(original.replace(old, new, 1))
    return original


def test_a_misspelt_key_no_stage_reads_stops_dvc_repro(repo):
    """The check stage tracks the whole params file: a key that no stage lists still
    makes `dvc status` stale and `dvc repro` fail, with the key named. (A misspelt key in
    a section a stage declares whole makes that stage stale too: train reads all of
    `drafter`.)"""
    repo, _ = repo
    run_command("dvc repro", repo)
    original = (repo / "params.yaml").read_text()
    try:
        _set(repo, "drafter", "block_sise", 8)
        _set(repo, "trian", "lr", 0.1)
        assert _stale(repo) == {"check", "train"}
        p = run_command("dvc repro", repo, check=False)
        assert p.returncode != 0
        err = p.stdout + p.stderr
        assert "unknown key 'drafter.block_sise'" in err and "unknown key 'trian'" in err
        assert _ran(p.stdout) == {"check"}  # check has no deps: dvc runs it first, and stops there
    finally:
        (repo / "params.yaml").write_text(original)
    run_command("dvc repro", repo)
    assert _stale(repo) == set()


def test_a_prompt_file_anywhere_is_a_dependency_once_declared(repo, tmp_path):
    """A local source outside the download stage's deps stops it, named; declared (in the
    repository or outside it), an edit to the file reruns the stage."""
    repo, _ = repo
    extra = repo / "data/extra/p.jsonl"
    outside = tmp_path / "elsewhere" / "q.jsonl"
    for f, text in ((extra, "Write a haiku about rain."), (outside, "Name three prime numbers.")):
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"prompt": text, "category": "writing"}) + "\n")
    params, dvc_yaml = repo / "params.yaml", repo / "dvc.yaml"
    original_params = params.read_text()
    p = yaml.safe_load(original_params)
    p["download"]["sources"] += [{"name": "extra", "kind": "local", "path": "data/extra/p.jsonl", "role": "train"},
                                 {"name": "outside", "kind": "local", "path": str(outside), "role": "train"}]
    params.write_text(yaml.safe_dump(p, sort_keys=False))
    original_dvc = dvc_yaml.read_text()
    try:
        refused = run_command("dvc repro download", repo, check=False)
        assert refused.returncode != 0
        assert "download.sources[3] 'extra': data/extra/p.jsonl is not among the stage's inputs" in refused.stderr
        _edit(dvc_yaml, "      - ${paths.prompt_files}\n",
              f"      - ${{paths.prompt_files}}\n      - data/extra\n      - {outside}\n")
        run_command("dvc repro download", repo)
        assert "download" not in _stale(repo)
        with extra.open("a") as f:
            f.write(json.dumps({"prompt": "Write a limerick about snow."}) + "\n")
        assert "download" in _stale(repo)
        run_command("dvc repro download", repo)
        outside.write_text(json.dumps({"prompt": "Name four prime numbers."}) + "\n")
        assert "download" in _stale(repo)  # DVC hashes an outside file too (not cached, not pushed)
    finally:
        params.write_text(original_params)
        dvc_yaml.write_text(original_dvc)
        shutil.rmtree(repo / "data/extra")
    run_command("dvc repro download", repo)  # the same prompts as before: nothing after it is stale
    assert _stale(repo) == set()


def test_a_damaged_persisted_output_is_set_aside_and_dvc_repro_goes_on(repo):
    repo, _ = repo
    answers = repo / "data/regen/answers.parquet"
    answers.write_bytes(answers.read_bytes()[:100])  # as `truncate` or a full disk leaves it
    p = run_command("dvc repro", repo)
    assert "data/regen/answers.parquet is unreadable" in p.stdout + p.stderr
    assert [f.name.startswith("answers.parquet.") for f in (repo / "data/regen_work/damaged").iterdir()] == [True]
    assert "regenerate" in _ran(p.stdout) and _stale(repo) == set()
    shutil.rmtree(repo / "data/regen_work")


def test_a_pull_into_a_fresh_clone_leaves_a_clean_status(repo, tmp_path):
    """A colleague's results are reused, not recomputed: nothing the pipeline needs to be
    up to date is left out of the cache (resume state is not an output)."""
    repo, _ = repo
    remote = tmp_path / "remote"
    run_command(f"dvc remote add -f -d shared {remote} && dvc push -q && git add -A && git commit -qm pushed", repo)
    try:
        clone = tmp_path / "clone"
        run_command(f"git clone -q {repo} {clone}", tmp_path)
        run_command("dvc pull -q", clone)
        assert _stale(clone) == set()
        assert (clone / "data/drafter/model.safetensors").read_bytes() == \
            (repo / "data/drafter/model.safetensors").read_bytes()
        # The drafter as a model artifact (dvc.yaml `artifacts:`): registered as a version (a
        # GTO git tag, what `gto register` writes), then fetched by name from the remote.
        run_command("git tag -a drafter@v0.1.0 -m 'first drafter'", repo)
        got = tmp_path / "artifact"
        run_command(f"dvc artifacts get {repo} drafter -o {got}", tmp_path)
        assert (got / "model.safetensors").read_bytes() == (repo / "data/drafter/model.safetensors").read_bytes()
    finally:
        run_command("git tag -d drafter@v0.1.0 || true; dvc remote remove shared && git add -A && git commit -qm unshared",
             repo)
