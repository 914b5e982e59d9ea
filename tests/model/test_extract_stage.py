"""The extract stage as users run it, on the tiny Qwen3.6-layout target (hybrid Gated
DeltaNet, a vision tower, the real vocabulary): under torchrun with 2 processes (started
from params and by hand), killed with SIGKILL and rerun, and refused before any work when
the shards will not fit."""

from __future__ import annotations

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

from draftline.config.drafter import DrafterParams

from draftline.config.target import TargetParams
from draftline.hidden.plan import Record
from draftline.hidden.reader import load_sequences
from draftline.hidden.store import ShardsMissing, check_shards
from draftline.io import write_parquet
from draftline.target.info import describe

N_ROWS = 40


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A project folder: the tiny target, its info.json, 40 tokenized rows, params.yaml with
    shards of about 1,100 tokens (10 shards)."""
    from tiny_layouts import qwen36_target

    root = tmp_path_factory.mktemp("extract")
    model = qwen36_target(root / "data/target/model", num_layers=4)
    info = describe(model, TargetParams(), DrafterParams(num_layers=2, target_layer_ids=[0, 2]), {"source": "tiny"})
    (root / "data/target/info.json").write_text(json.dumps(info))
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(N_ROWS):
        n = int(torch.randint(60, 400, (1,), generator=g))
        rows.append({"id": f"r{i:02d}", "split": "val" if i % 10 == 9 else "train",
                     "input_ids": torch.randint(0, 248000, (n,), generator=g).tolist(),
                     "loss_mask": [0] * (n // 4) + [1] * (n - n // 4)})
    write_parquet(root / "data/tokens/train.parquet", rows)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    bpt = Record(64, 2, "final").bytes_per_token
    params["extract"] |= {"batch_tokens": 800, "shard_bytes": 1100 * bpt}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copy(ROOT / "dvc.yaml", root / "dvc.yaml")  # the paths `draftline extract` defaults to
    return root


def _copy(base: Path, dest: Path, **extract) -> Path:
    shutil.copytree(base, dest)
    if extract:
        params = yaml.safe_load((dest / "params.yaml").read_text())
        params["extract"] |= extract
        (dest / "params.yaml").write_text(yaml.safe_dump(params))
    return dest


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"), DRAFTLINE_NO_PROGRESS="1", OMP_NUM_THREADS="1")


def _cmd(nproc: int) -> list[str]:
    if nproc == 1:
        return [sys.executable, "-m", "draftline", "extract"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "draftline", "extract"]


def _extract(folder: Path, nproc: int = 1) -> dict:
    p = subprocess.run(_cmd(nproc), cwd=folder, env=_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return json.loads((folder / "data/metrics/extract.json").read_text())


def _shards(folder: Path) -> dict[str, bytes]:
    hidden = folder / "data/hidden"
    return {p.name: p.read_bytes() for p in sorted(hidden.glob("shard-*.safetensors"))}


@pytest.fixture(scope="module")
def whole(base, tmp_path_factory) -> Path:
    folder = _copy(base, tmp_path_factory.mktemp("whole") / "p")
    m = _extract(folder)
    assert m["shards"] >= 8 and m["shards_written"] == m["shards"] and m["resumed_shards"] == 0
    assert m["bytes_per_token"] == Record(64, 2, "final").bytes_per_token
    assert m["tokens"] * m["bytes_per_token"] == m["total_bytes"] <= m["free_bytes"]
    return folder


@pytest.mark.parametrize("launch", ["params", "torchrun"])
def test_two_processes_write_what_one_does(base, whole, tmp_path, launch):
    if launch == "params":  # extract.processes_per_node: 2, the stage starts torchrun itself
        two = _copy(base, tmp_path / "two", processes_per_node=2)
        m = _extract(two)
    else:  # the user's own torchrun line
        two = _copy(base, tmp_path / "two")
        m = _extract(two, nproc=2)
    assert m["ranks"] == 2 and m["shards_written"] == m["shards"]
    ledgers = sorted(p.name for p in (two / "data/hidden").glob("ledger-r*.jsonl"))
    assert ledgers == ["ledger-r000.jsonl", "ledger-r001.jsonl"]  # each rank its own share and index part
    assert _shards(two) == _shards(whole)  # same rows, same bytes per row, same files
    for name in ("index.json", "manifest.json"):
        assert (two / "data/hidden" / name).read_bytes() == (whole / "data/hidden" / name).read_bytes()
    seqs = load_sequences(two / "data/hidden")
    assert sorted(s.id for s in seqs) == [f"r{i:02d}" for i in range(N_ROWS)]


@pytest.fixture(scope="module")
def whole_fp8(base, tmp_path_factory) -> Path:
    """`whole` with extract.state_dtype: float8_e4m3fn."""
    folder = _copy(base, tmp_path_factory.mktemp("whole-fp8") / "p", state_dtype="float8_e4m3fn")
    m = _extract(folder)
    assert m["bytes_per_token"] == Record(64, 2, "final", 0, "float8_e4m3fn").bytes_per_token
    assert m["shards"] >= 4 and json.loads((folder / "data/hidden/manifest.json").read_text())["dtype"] == \
        "float8_e4m3fn"
    return folder


@pytest.mark.parametrize("kill_at", ["mid-first-shard", "after-3-shards"])
def test_sigkill_then_rerun_equals_an_uninterrupted_run(base, whole, tmp_path, kill_at):
    _kill_and_rerun(_copy(base, tmp_path / "cut"), whole, kill_at)


def test_fp8_sigkill_then_rerun_equals_an_uninterrupted_run(base, whole, whole_fp8, tmp_path):
    """FP8 shards (their scales held to the end of each shard) resume to the same bytes, and
    take about half the bf16 run's."""
    _kill_and_rerun(_copy(base, tmp_path / "cut", state_dtype="float8_e4m3fn"), whole_fp8, "mid-first-shard")
    fp8, bf16 = (sum(len(b) for b in _shards(f).values()) for f in (whole_fp8, whole))
    assert 0.45 < fp8 / bf16 < 0.6, (fp8, bf16)


def _plan_rows(folder: Path, *args: str) -> dict[tuple[str, str], tuple[bool, int, int]]:
    """`draftline extract --plan-only` -> (state dtype, teacher) -> (configured, B/token, shards)."""
    p = subprocess.run([*_cmd(1), "--plan-only", *args], cwd=folder, env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {}
    for line in p.stdout.splitlines()[2:-1]:
        mark, (dtype, teacher, bpt, _, _, shards) = line[0] == "*", line[2:].split()
        rows[dtype, teacher] = (mark, int(bpt.replace(",", "")), int(shards.replace(",", "")))
    assert len(rows) == 6 and p.stdout.splitlines()[-1].startswith("* params: "), p.stdout
    return rows


def test_the_plan_only_table_is_what_extraction_stores(whole, whole_fp8):
    """Before any work: the plan of each format, the params' one marked; each agrees with
    what the runs then stored (bytes per token, shards)."""
    rows = _plan_rows(whole)
    assert [k for k, (mark, _, _) in rows.items() if mark] == [("bfloat16", "final")]
    for folder, dtype in ((whole, "bfloat16"), (whole_fp8, "float8_e4m3fn")):
        m = json.loads((folder / "data/metrics/extract.json").read_text())
        assert rows[dtype, "final"][1:] == (m["bytes_per_token"], m["shards"]), dtype
    # a target and a data size not run here: Qwen3.6-27B's 5 layers x 5120, 200M tokens
    qwen = _plan_rows(whole, "--tokens-total", "200000000", "--layers", "5", "--hidden-size", "5120")
    assert qwen["bfloat16", "final"][1] == 6 * 5120 * 2 + 5 and qwen["float8_e4m3fn", "final"][1] == 6 * 5120 + 6 * 4 + 5


def _kill_and_rerun(cut: Path, whole: Path, kill_at: str) -> None:
    hidden = cut / "data/hidden"
    proc = subprocess.Popen(_cmd(1), cwd=cut, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300

    def lines() -> int:
        f = hidden / "ledger-r000.jsonl"
        return len(f.read_text().splitlines()) if f.exists() else 0

    while not (list(hidden.glob(".shard-*.tmp")) if kill_at == "mid-first-shard" else lines() >= 3):
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.time() < deadline
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)  # no chance to clean up: the worst case
    proc.wait()
    assert not (hidden / "index.json").exists(), "the run finished before it could be killed"
    done = lines()
    m = _extract(cut)
    assert m["resumed_shards"] == done and m["shards_written"] == m["shards"] - done  # at most the cut one again
    assert not list(hidden.glob(".*.tmp"))  # the dead process's temp was removed, not trusted
    assert _shards(cut) == _shards(whole)
    assert (hidden / "index.json").read_bytes() == (whole / "data/hidden/index.json").read_bytes()


def test_a_kill_between_rename_and_ledger_recomputes_that_shard_only(whole, tmp_path):
    """The two windows a kill can hit that polling cannot aim at, left on disk as a kill
    leaves them: a finished shard with no ledger line, and a line cut in the middle."""
    folder = shutil.copytree(whole, tmp_path / "p")
    hidden = folder / "data/hidden"
    log = hidden / "ledger-r000.jsonl"
    entries = log.read_text().splitlines()
    log.write_text("\n".join(entries[:-2]) + "\n" + entries[-2][: len(entries[-2]) // 2])
    (hidden / "index.json").unlink()
    m = _extract(folder)
    assert m["resumed_shards"] == m["shards"] - 2 and m["shards_written"] == 2
    assert _shards(folder) == _shards(whole)
    assert (hidden / "index.json").read_bytes() == (whole / "data/hidden/index.json").read_bytes()


def test_the_planner_refuses_a_filesystem_too_small_before_loading_anything(base, tmp_path):
    """The shards go to /dev/shm, a real filesystem of a few GB, at Kimi K2.6's width
    (7168, 5 layers + final: 86 KB a token): the stage stops with the numbers and writes
    nothing, before loading the target (here: a folder with no model in it)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shutil.disk_usage(shm).free > 200e9:
        pytest.skip("no /dev/shm of a few GB here")
    free = shutil.disk_usage(shm).free
    folder = _copy(base, tmp_path / "p", shard_dir=str(shm / f"draftline-test-{os.getpid()}"))
    info = json.loads((folder / "data/target/info.json").read_text())
    info |= {"hidden_size": 7168, "num_hidden_layers": 61, "target_layer_ids": [1, 15, 30, 44, 58]}
    (folder / "data/target/info.json").write_text(json.dumps(info))
    shutil.rmtree(folder / "data/target/model")
    (folder / "data/target/model").mkdir()
    bpt = Record(7168, 5, "final").bytes_per_token
    per_row = int(free / bpt / 40) + 1  # 40 rows: a plan of just over the free space
    write_parquet(folder / "data/tokens/train.parquet",
                  [{"id": f"r{i}", "split": "train", "input_ids": [7] * per_row, "loss_mask": [1] * per_row}
                   for i in range(40)])
    p = subprocess.run(_cmd(1), cwd=folder, env=_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()[-1]
    assert "extract: the plan needs" in err and "/dev/shm" in err and "free" in err, p.stderr[-2000:]
    assert not (shm / f"draftline-test-{os.getpid()}").exists()
    assert not (folder / "data/hidden").exists() and not (folder / "data/metrics/extract.json").exists()


def test_shards_outside_the_output_are_found_through_the_manifest(base, whole, tmp_path, monkeypatch):
    """extract.shard_dir: DVC versions index.json and manifest.json only; a colleague's
    copy elsewhere is found with DRAFTLINE_SHARD_DIR and checked against the manifest."""
    shards = tmp_path / "big-disk"
    folder = _copy(base, tmp_path / "p", shard_dir=str(shards))
    m = _extract(folder)
    hidden = folder / "data/hidden"
    assert sorted(p.name for p in hidden.iterdir()) == ["index.json", "manifest.json"]
    assert {p.name: p.read_bytes() for p in sorted(shards.glob("shard-*.safetensors"))} == _shards(whole)
    manifest = json.loads((hidden / "manifest.json").read_text())
    assert manifest["shard_dir"] == str(shards) and len(manifest["shards"]) == m["shards"]
    copy = Path(shutil.move(shards, tmp_path / "copy"))
    with pytest.raises(ShardsMissing, match=r"shard-00000.safetensors: missing, the manifest says \d+ bytes"):
        load_sequences(hidden)
    monkeypatch.setenv("DRAFTLINE_SHARD_DIR", str(copy))
    check_shards(hidden, hashes=True)
    assert len(load_sequences(hidden)) == N_ROWS
    f = copy / "shard-00001.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(ShardsMissing, match="shard-00001.safetensors: its xxh3-128 hash differs"):
        check_shards(hidden, hashes=True)
