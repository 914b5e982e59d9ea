"""The train stage as users run it: killed and resumed, and under torchrun with 2 processes
(both with the default loader, rows streamed from the shards), and streamed against loaded."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT
from extract_helpers import extract_in_process
from safetensors.torch import load_file

from draftline.config.drafter import DrafterParams

from draftline.config.target import TargetParams
from draftline.io import write_parquet
from draftline.target.info import describe

pytestmark = pytest.mark.slow

ANSWERS = [
    ("Write a Python function that adds two numbers.", "def add(a, b):\n    return a + b"),
    ("What is the capital of France?", "The capital of France is Paris."),
    ("List three colors.", "Red, green and blue."),
    ("Explain a variable in one sentence.", "A variable is a named place that stores a value in a program."),
    ("Write a haiku about rain.", "Soft rain on the roof,\nwhispers to the sleeping town,\nmorning smells of earth."),
    ("What is 12 times 12?", "12 times 12 is 144."),
    ("Reverse a string in Python.", "Use slicing: `s[::-1]` returns the string reversed."),
    ("Name two planets.", "Mars and Jupiter are two planets of the solar system."),
    ("Say hello in French.", "Bonjour!"),
    ("Give a synonym for happy.", "Joyful is a synonym for happy."),
    ("Sort a list in Python.", "Call `sorted(xs)` for a new list or `xs.sort()` to sort in place."),
    ("What is 2 + 2?", "2 + 2 equals 4."),
]


@pytest.fixture(scope="module")
def base(tmp_path_factory, target_dir, target_model, tokenizer):
    """A project folder holding the target, its info and real hidden states of 12 answers."""
    from draftline.sequences.loss_mask import encode

    root = tmp_path_factory.mktemp("train_base")
    (root / "data" / "target").mkdir(parents=True)
    shutil.copytree(target_dir, root / "data" / "target" / "model")
    shutil.copy(ROOT / "dvc.yaml", root / "dvc.yaml")  # the paths `draftline train` defaults to
    dp = DrafterParams(num_layers=1, block_size=4, target_layer_ids=None)
    info = describe(target_dir, TargetParams(), dp, {"source": "embedded"})
    (root / "data" / "target" / "info.json").write_text(json.dumps(info))
    rows = []
    for i, (q, a) in enumerate(ANSWERS):
        e = encode(tokenizer, [{"role": "user", "content": q}, {"role": "assistant", "content": a}], ["stop"], 256)
        rows.append({"id": f"r{i:02d}", "split": "val" if i >= 10 else "train", "input_ids": e.input_ids,
                     "loss_mask": e.loss_mask})
    layers = info["target_layer_ids"]
    extract_in_process(target_model, rows, layers, root / "data" / "hidden", 4096, tokenizer.eos_token_id)
    write_parquet(root / "data" / "tokens" / "train.parquet", rows)  # what online features read
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["drafter"] = {**params["drafter"], "num_layers": 1, "block_size": 4}
    params["train"] = {**params["train"], "num_anchors": 16, "batch_size": 4, "grad_accum": 1, "epochs": 12,
                       "max_steps": None, "eval_every": 10, "checkpoint_every": 5, "lr": 0.002, "loss": "ce"}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def _copy(base: Path, dest: Path, arch: str = "dflash", **train) -> Path:
    shutil.copytree(base, dest, symlinks=True)
    p = yaml.safe_load((dest / "params.yaml").read_text())
    p["drafter"]["arch"] = arch
    p["train"].update(train)
    (dest / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    return dest


def _env():
    return dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}", DRAFTLINE_THREADS="1", DRAFTLINE_NO_PROGRESS="1",
                OMP_NUM_THREADS="1")


def _cmd(nproc: int) -> list[str]:
    if nproc == 1:
        return [sys.executable, "-m", "draftline", "train"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "draftline", "train"]


def _train(folder: Path, nproc: int = 1) -> dict:
    p = subprocess.run(_cmd(nproc), cwd=folder, env=_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return json.loads((folder / "data/metrics/train.json").read_text())


def _curve(folder: Path, name: str) -> list[tuple[str, str]]:
    """(step, value) rows of a DVCLive curve (without any timestamp column: those differ)."""
    lines = (folder / f"data/train_live/plots/metrics/{name}.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    at = [head.index("step"), head.index(name.split("/")[-1])]
    return [tuple(line.split("\t")[i] for i in at) for line in lines[1:]]


EVAL_CURVES = ("eval/loss", "eval/acc_1", "eval/tau_estimate")  # DVCLive's held-out curves


def _rounded(curve: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(step, f"{float(v):.6g}") for step, v in curve]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "data/drafter/model.safetensors"))


@pytest.mark.parametrize("arch", ["dflash", "dflash2"])
def test_killed_run_resumes_to_identical_weights(base, tmp_path, arch):
    whole = _copy(base, tmp_path / "whole", arch)
    m_whole = _train(whole)
    assert m_whole["steps"] == 36 and m_whole["resumed_from_step"] is None

    cut = _copy(base, tmp_path / "cut", arch)
    proc = subprocess.Popen(_cmd(1), cwd=cut, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    state = cut / "data/train_state"
    deadline = time.time() + 300
    while not (state / "step-0000010.pt").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.time() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # no chance to clean up: the worst case
    proc.wait()
    assert not (cut / "data/drafter").exists(), "the run finished before it could be killed"
    steps_saved = sorted(p.name for p in state.glob("step-*.pt"))
    assert steps_saved and not list(state.glob("*.tmp"))
    m_cut = _train(cut)
    assert m_cut["resumed_from_step"] >= 10 and m_cut["steps"] == 36
    a, b = _weights(whole), _weights(cut)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k  # bitwise on CPU
    # The curves of the resumed run are the uninterrupted run's, step for step: each step
    # once, the resumed run's replayed from its checkpoint.
    assert _curve(whole, "train/loss") == _curve(cut, "train/loss") and len(_curve(cut, "train/loss")) == 36
    for name in EVAL_CURVES:
        assert _curve(whole, name) == _curve(cut, name), name
    live = json.loads((cut / "data/train_live/metrics.json").read_text())
    assert live["step"] == 36 and live["train"]["loss"] == float(_curve(whole, "train/loss")[-1][1])


@pytest.mark.parametrize("loss", ["kl", "ce"])
def test_streamed_rows_train_the_same_drafter_as_loaded_rows(base, tmp_path, loss):
    # kl: the teacher computed from the stored final state; ce: none.
    loaded = _copy(base, tmp_path / "memory", loss=loss, loader="memory", epochs=3)
    streamed = _copy(base, tmp_path / "stream", loss=loss, loader="stream", prefetch=3, epochs=3)
    m1, m2 = _train(loaded), _train(streamed)
    assert m1["steps"] == m2["steps"] == 9
    a, b = _weights(loaded), _weights(streamed)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k  # bitwise on CPU
    for name in EVAL_CURVES:  # to 6 significant digits, as the stage's TSVs round
        assert _rounded(_curve(loaded, name)) == _rounded(_curve(streamed, name)), name


def test_fsdp_shards_train_what_ddp_trains(base, tmp_path):
    """train.parallel: fsdp over 2 gloo processes: weights, gradients and AdamW state
    sharded, checkpoints and the exported drafter gathered whole; DDP's training up to
    the order of float sums."""
    ddp = _copy(base, tmp_path / "ddp", epochs=3, processes_per_node=2)
    fsdp = _copy(base, tmp_path / "fsdp", epochs=3, processes_per_node=2, parallel="fsdp")
    m1, m2 = _train(ddp), _train(fsdp)
    assert m1["processes"] == m2["processes"] == 2 and m1["steps"] == m2["steps"] == 9
    # The first two steps' losses are equal; then the sharded gradient norm (summed shard by
    # shard, 1e-5 apart) clips a little differently, and AdamW carries that on.
    l1, l2 = _curve(ddp, "train/loss"), _curve(fsdp, "train/loss")
    assert l1[:2] == l2[:2]
    assert all(abs(float(x) - float(y)) <= 5e-3 * float(x) for (_, x), (_, y) in zip(l1, l2)), (l1, l2)
    a, b = _weights(ddp), _weights(fsdp)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=0, atol=2e-3), (k, (a[k] - b[k]).abs().max())
    # Checkpoints hold the whole weights, as DDP's do.
    saved = [torch.load(sorted((f / "data/train_state").glob("step-*.pt"))[-1], weights_only=True)["model"]
             for f in (ddp, fsdp)]
    assert {k: v.shape for k, v in saved[0].items()} == {k: v.shape for k, v in saved[1].items()}


def test_online_features_train_as_the_stored_ones_do(base, tmp_path):
    """train.features: online: the target runs inside the training process; the same steps,
    losses within bf16 rounding of the features (the target runs in bf16 where the CPU can)."""
    offline = _copy(base, tmp_path / "offline", loss="kl", epochs=3)
    online = _copy(base, tmp_path / "online", loss="kl", epochs=3, features="online")
    shutil.rmtree(online / "data/hidden")  # never read online
    m_off, m_on = _train(offline), _train(online)
    assert m_on["steps"] == m_off["steps"] == 9
    a, b = _curve(offline, "train/loss"), _curve(online, "train/loss")
    assert [s for s, _ in a] == [s for s, _ in b]
    assert abs(float(a[0][1]) - float(b[0][1])) <= 0.02 * float(a[0][1]), (a[0], b[0])


def test_changed_params_do_not_resume_a_stale_checkpoint(base, tmp_path):
    run = _copy(base, tmp_path / "stale", epochs=2, checkpoint_every=2)
    _train(run)
    p = yaml.safe_load((run / "params.yaml").read_text())
    p["train"]["lr"] = 0.001
    (run / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    assert _train(run)["resumed_from_step"] is None


@pytest.mark.parametrize("arch", ["dflash", "dflash2"])
def test_two_processes_equal_one_with_the_same_global_batch(base, tmp_path, arch):
    # 1 process accumulating 2 micro-batches of 2 == 2 processes of 1 micro-batch of 2.
    one = _copy(base, tmp_path / "one", arch, grad_accum=2, epochs=3)
    m1 = _train(one)
    if arch == "dflash":  # the stage starts torchrun itself, from params
        two = _copy(base, tmp_path / "two", arch, grad_accum=1, epochs=3, processes_per_node=2)
        m2 = _train(two)
    else:  # the user's own torchrun line
        two = _copy(base, tmp_path / "two", arch, grad_accum=1, epochs=3)
        m2 = _train(two, nproc=2)
    assert m2["processes"] == 2 and m1["processes"] == 1 and m1["steps"] == m2["steps"] == 9
    a, b = _weights(one), _weights(two)
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=0, atol=1e-6), (k, (a[k] - b[k]).abs().max())
    assert _curve(one, "train/loss") == _curve(two, "train/loss")
