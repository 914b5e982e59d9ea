"""An API key echoed back by a server reaches no artifact, log or output: `dvc repro
regenerate` in a temporary git repo against a server that echoes the Authorization header."""

import json
import shutil
import sys
from secrets import token_hex

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ROOT
from openai_server import EchoServer
from pipeline_helpers import copy_code, run_command

from draftline.io import write_parquet

pytestmark = pytest.mark.slow

WORDS = ["reject", "crash", "garble", "echo", "hello"]


def _repo(repo, url: str, target_dir):
    # The target's config and tokenizer (the stage reads them for servers too), not its weights.
    shutil.copytree(target_dir, repo / "data/target/model", ignore=shutil.ignore_patterns("*.safetensors"))
    write_parquet(repo / "data/mix/train.parquet", [
        {"id": f"q{i}", "source": "s", "category": "chat", "split": "train",
         "messages": [{"role": "user", "content": f"Please {w}"}]} for i, w in enumerate(WORDS)])
    copy_code(ROOT, repo)
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    # A launched "server" that prints its ${VAR} argument: the log must mask it too.
    launch = f"{sys.executable} -c 'import sys, time; print(sys.argv[1], flush=True); time.sleep(60)' ${{REGEN_KEY}}"
    # check_rows 0: an echo server has no log-probs to hold against a target (agreement is tested on its own)
    params["regenerate"] |= {"backend": "openai", "max_new_tokens": 8, "max_error_rate": 1.0, "check_rows": 0, "openai": {
        **params["regenerate"]["openai"], "urls": [url], "model": "echo-model", "api_key_env": "REGEN_KEY",
        "max_retries": 1, "backoff_s": 0.01, "backoff_max_s": 0.02, "startup_timeout_s": 10, "launch": [launch]}}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_command("git init -q && dvc init -q && git add -A && git commit -qm init", repo)


def _files_with(repo, needle: bytes) -> list[str]:
    return [str(f.relative_to(repo)) for f in sorted(repo.rglob("*"))
            if f.is_file() and "src" not in f.relative_to(repo).parts and needle in f.read_bytes()]


def test_an_echoed_key_is_masked_everywhere(tmp_path, monkeypatch, target_dir):
    key = f"sk-test-{token_hex(16)}"
    monkeypatch.setenv("REGEN_KEY", key)
    with EchoServer() as srv:
        _repo(tmp_path, srv.url, target_dir)
        monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'src'}:{tmp_path}")  # stages import the copy under test
        run = run_command("dvc repro -s regenerate", tmp_path)
        errors = {e["id"]: e for e in pq.read_table(tmp_path / "data/regen/errors.parquet").to_pylist()}
        # not vacuous: each echoing body reached a stored reason, with the key masked in it
        assert {i: e["kind"] for i, e in errors.items()} == {"q0": "http_4xx", "q1": "http_5xx", "q2": "malformed"}
        assert all("Bearer ***" in e["reason"] for e in errors.values()), errors
        answers = {a["id"]: a for a in pq.read_table(tmp_path / "data/regen/answers.parquet").to_pylist()}
        assert answers["q3"]["messages"][-1]["content"] == "you sent Bearer ***"
        assert "***" in (tmp_path / "logs/regenerate/server-0.log").read_text()
        assert json.loads((tmp_path / "data/metrics/regenerate.json").read_text())["errors"] == 3
        assert (tmp_path / "dvc.lock").exists() and list((tmp_path / ".dvc/cache").rglob("*"))
        # the key itself: nowhere in data/, logs/, dvc.lock or the DVC cache
        assert _files_with(tmp_path, key.encode()) == []
        # a model the server does not list: the one-line error quotes its /models list
        params = yaml.safe_load((tmp_path / "params.yaml").read_text())
        params["regenerate"]["openai"]["model"] = "nope"
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        bad = run_command("dvc repro -s regenerate", tmp_path, check=False)
    assert bad.returncode != 0 and "'nope' is not served by" in bad.stderr and "Bearer ***" in bad.stderr
    for out in (run.stdout, run.stderr, bad.stdout, bad.stderr):
        assert key not in out
    assert _files_with(tmp_path, key.encode()) == []
