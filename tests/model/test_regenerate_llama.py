"""Regeneration against real llama.cpp servers on loopback: spreading, faults, exact
resume after SIGKILL, bad input, and servers launched by the stage itself."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ROOT
from fault_proxy import FaultProxy
from llama_server import ALIAS, command, free_port, port_open

from draftline.config.params import parse_params

from draftline.config.regenerate import OpenAIParams, RegenerateParams
from draftline.io import write_parquet
from draftline.regenerate.client import EndpointError
from draftline.regenerate.drive import answer_all
from draftline.regenerate.openai_run import OpenAIDriver

QUESTIONS = ["Say hello.", "Name a fruit.", "What is 2+2?", "Name a color.", "Say goodbye.", "Name an animal.",
             "What day follows Monday?", "Name a planet.", "Say yes.", "Name a river.", "Count to three.",
             "Name a tree."]


def _rows(n=len(QUESTIONS)):
    rows = [{"id": f"q{i}", "source": "s", "category": "chat", "split": "train",
             "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)] + f" ({i})"}]} for i in range(n)]
    rows.append({"id": "multi", "source": "s", "category": "chat", "split": "train",
                 "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Pick a number."},
                              {"role": "user", "content": "Double it."}]})
    return rows


def _params(urls, regen=None, **kw):
    kw = {"backoff_s": 0.02, "backoff_max_s": 0.2, "max_in_flight": 2, "startup_timeout_s": 10, **kw}
    return RegenerateParams(backend="openai", max_new_tokens=8, **(regen or {}), openai=OpenAIParams(urls=urls, **kw))


def _run(p, tmp_path, rows=None, name="w"):
    return answer_all(rows or _rows(), OpenAIDriver(p, tmp_path / "logs"), p, "fp", tmp_path / name)


def test_two_endpoints_least_outstanding(llama_servers, tmp_path):
    urls = [s.url for s in llama_servers]
    p = _params(urls, regen={"temperature": 0.7, "top_p": 0.9, "seed": 3, "samples_per_prompt": 2})
    out = _run(p, tmp_path)
    rows = _rows()
    assert not out.errors and len(out.rows) == 2 * len(rows)
    assert len({r["key"] for r in out.rows}) == len(out.rows)
    assert sorted((r["id"], r["sample"]) for r in out.rows) == sorted((r["id"], s) for r in rows for s in (0, 1))
    # both servers took a fair share
    per = [e["requests"] for e in out.stats["endpoints"].values()]
    assert min(per) >= 0.3 * sum(per), per
    r = next(r for r in out.rows if r["id"] == "multi")
    assert [m["role"] for m in r["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert len(r["finish_reason"]) == 2
    for r in out.rows:  # every row says what produced it
        assert (r["gen_temperature"], r["gen_top_p"], r["gen_seed"], r["gen_max_new_tokens"]) == (0.7, 0.9, 3, 8)
        assert r["gen_model"] == ALIAS and r["served_model"] == ALIAS and r["endpoint"] in urls
        # llama.cpp's server (llama-cpp-python) ignores vLLM's return_token_ids: no ids, not an error
        assert r["completion_ids"] is None


def test_faults_are_retried_and_counted(llama_servers, tmp_path):
    # The timeout leaves room for a real 8-token answer on a loaded 2-core machine (at 1.5 s
    # a busy CI box timed out honest requests too); only the 12 s delay must time out.
    schedule = {1: "drop", 2: "500", 3: "429", 4: ("delay", 12.0), 5: "garbage", 7: "drop", 8: "500"}
    with FaultProxy(llama_servers[0].url.rsplit("/v1", 1)[0], lambda n, body: schedule.get(n, "pass")) as proxy:
        p = _params([proxy.url], timeout_s=6.0, max_retries=4)
        out = _run(p, tmp_path)
    assert not out.errors and len(out.rows) == len(_rows())
    assert out.stats["retries"] == {"connection": 2, "http_5xx": 2, "http_429": 1, "timeout": 1, "malformed": 1}
    clean = _run(_params([llama_servers[0].url]), tmp_path, name="clean")
    # The same keys and, greedy on the same server, the same single-turn answers as a run without
    # faults. The two-turn row is checked for shape only: its second prompt carries the first
    # answer, and llama.cpp's prefix-cache reuse (which depends on the order requests arrived in)
    # has flipped a near-tie in that second answer on a loaded CI box.
    assert {r["key"] for r in out.rows} == {r["key"] for r in clean.rows}
    single = lambda rows: {r["key"]: r["completion"] for r in rows if r["id"] != "multi"}  # noqa: E731
    assert single(out.rows) == single(clean.rows)
    multi = next(r for r in out.rows if r["id"] == "multi")
    assert [m["role"] for m in multi["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert all(m["content"].strip() for m in multi["messages"] if m["role"] == "assistant")


def test_bad_rows_are_recorded_and_the_run_goes_on(llama_servers, tmp_path):
    rows = _rows(4)
    rows.append({"id": "empty", "source": "s", "category": "chat", "split": "train",
                 "messages": [{"role": "user", "content": "  "}]})
    rows.append({"id": "long", "source": "s", "category": "chat", "split": "train",
                 "messages": [{"role": "user", "content": "word " * 2000}]})  # > n_ctx 512
    always = lambda n, body: "500" if "Name a fruit." in str(body["messages"]) else "pass"
    with FaultProxy(llama_servers[1].url.rsplit("/v1", 1)[0], always) as proxy:
        out = _run(_params([proxy.url], max_retries=2), tmp_path, rows)
    errs = {e["id"]: e for e in out.errors}
    assert set(errs) == {"empty", "long", "q1"}
    assert errs["empty"]["kind"] == "empty_prompt" and errs["empty"]["attempts"] == 0
    assert errs["long"]["kind"] == "http_4xx" and "HTTP 400" in errs["long"]["reason"]
    assert errs["long"]["attempts"] == 1  # a 400 is not retried
    assert errs["q1"]["kind"] == "http_5xx" and errs["q1"]["attempts"] == 3
    assert sorted(r["id"] for r in out.rows) == ["multi", "q0", "q2", "q3"]


def test_wrong_model_and_dead_endpoint_fail_early(llama_servers, tmp_path):
    with pytest.raises(EndpointError, match=f"'nope' is not served by {llama_servers[0].url}"):
        _run(_params([llama_servers[0].url], model="nope"), tmp_path)
    dead = f"http://127.0.0.1:{free_port()}/v1"
    t0 = time.time()
    with pytest.raises(EndpointError, match=f"{dead}: not reachable within the startup timeout"):
        _run(_params([llama_servers[0].url, dead], startup_timeout_s=2), tmp_path)
    assert time.time() - t0 < 15


def test_truncation_is_counted_and_can_be_dropped(llama_servers, tmp_path, monkeypatch):
    repo = _stage_dir(tmp_path / "stage", llama_servers, {"max_new_tokens": 3, "drop_truncated": True})
    _stage(repo)
    m = yaml.safe_load((repo / "data/metrics/regenerate.json").read_text())
    kept = pq.read_table(repo / "data/regen/answers.parquet").to_pylist()
    dropped = pq.read_table(repo / "data/regen/dropped.parquet").to_pylist()
    assert m["truncated_rows"] == len(dropped) > 0 and m["dropped_truncated"] == len(dropped)
    assert all("length" not in r["finish_reason"] for r in kept)
    assert len(kept) + len(dropped) == len(_rows())


# -- the stage as a process: exact resume after SIGKILL, error threshold, launched server --


def _stage_dir(repo: Path, servers, regen: dict, rows=None, target_dir=None) -> Path:
    (repo / "data/mix").mkdir(parents=True)
    (repo / "data/target").mkdir(parents=True)
    model = repo / "data/target/model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # the fingerprint input; the server holds the weights
    write_parquet(repo / "data/mix/train.parquet", rows or _rows())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    openai = {"urls": [s.url for s in servers], "max_in_flight": 2, "backoff_s": 0.02, "startup_timeout_s": 20,
              **regen.pop("openai", {})}
    # check_rows 0: the target folder holds no weights to check the server with (test_regenerate_agreement.py does)
    params["regenerate"] = {**params["regenerate"], "backend": "openai", "max_new_tokens": 24, "shard_rows": 2,
                            "check_rows": 0, **regen, "openai": {**params["regenerate"]["openai"], **openai}}
    parse_params(params)
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")  # the paths `draftline regenerate` defaults to
    return repo


def _stage(repo: Path, check=True, **popen):
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}", DRAFTLINE_NO_PROGRESS="1")
    cmd = [sys.executable, "-m", "draftline", "regenerate"]
    if popen:
        return subprocess.Popen(cmd, cwd=repo, env=env, **popen)
    p = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if check and p.returncode:
        raise AssertionError(p.stderr[-3000:])
    return p


def _keys(repo: Path) -> list[str]:
    return [r["key"] for r in pq.read_table(repo / "data/regen/answers.parquet").to_pylist()]


def test_sigkill_at_any_moment_then_rerun_gives_the_same_keys(llama_servers, tmp_path):
    rows = _rows(24)
    full = _stage_dir(tmp_path / "full", llama_servers, {}, rows)
    _stage(full)
    killed = _stage_dir(tmp_path / "killed", llama_servers, {}, rows)
    work = killed / "data/regen_work"
    for kill_after_shards in (1, 4):  # two kills at different points, then a clean finish
        proc = _stage(killed, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline and len(list(work.glob("part-*.parquet"))) < kill_after_shards:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (killed / "data/regen/answers.parquet").exists(), "killed too late: the run had finished"
    shards = [r["key"] for f in work.glob("part-*.parquet") for r in pq.read_table(f).to_pylist()]
    assert len(shards) == len(set(shards)) >= 4  # no duplicates, work kept across the kills
    out = _stage(killed)
    assert "resumed" in out.stdout
    m = yaml.safe_load((killed / "data/metrics/regenerate.json").read_text())
    assert m["rows_resumed"] >= 4 and m["rows_resumed"] + m["rows_generated"] == len(rows) + 0
    keys = _keys(killed)
    assert len(keys) == len(set(keys)) and sorted(keys) == sorted(_keys(full))
    assert not work.exists()
    # other settings: nothing from the finished run is mixed in
    params = yaml.safe_load((killed / "params.yaml").read_text())
    params["regenerate"]["max_new_tokens"] = 25
    (killed / "params.yaml").write_text(yaml.safe_dump(params))
    _stage(killed)
    m2 = yaml.safe_load((killed / "data/metrics/regenerate.json").read_text())
    assert m2["rows_resumed"] == 0 and not set(_keys(killed)) & set(keys)


def test_error_rate_above_threshold_fails_and_rerun_retries_only_failures(llama_servers, tmp_path):
    flaky = {"on": True}
    rule = lambda n, body: "500" if flaky["on"] and "Name a fruit." in str(body["messages"]) else "pass"
    with FaultProxy(llama_servers[0].url.rsplit("/v1", 1)[0], rule) as proxy:
        class P:  # the stage reads urls from params; point them at the proxy
            url = proxy.url
        repo = _stage_dir(tmp_path / "s", [P], {"max_error_rate": 0.05, "openai": {"max_retries": 1}})
        bad = _stage(repo, check=False)
        assert bad.returncode == 2
        assert "1 of 13 rows failed (7.7%), above regenerate.max_error_rate 0.05" in bad.stderr
        errs = pq.read_table(repo / "data/regen/errors.parquet").to_pylist()
        assert [(e["id"], e["kind"], e["attempts"]) for e in errs] == [("q1", "http_5xx", 2)]
        assert not (repo / "data/regen/answers.parquet").exists()
        flaky["on"] = False
        _stage(repo)
    m = yaml.safe_load((repo / "data/metrics/regenerate.json").read_text())
    assert (m["rows_resumed"], m["rows_generated"], m["errors"]) == (12, 1, 0)


def test_stage_launches_and_stops_its_server(tmp_path, monkeypatch):
    port = free_port()
    monkeypatch.setenv("FAKE_SECRET", "sk-do-not-log")

    class S:
        url = f"http://127.0.0.1:{port}/v1"
    # The server demands a key it gets from ${FAKE_SECRET}; the client reads the same
    # variable. The key must reach neither params, the server log, the rows nor metrics.
    launch = " ".join(command(port)) + " --api_key ${FAKE_SECRET}"
    repo = _stage_dir(tmp_path / "s", [S], {"openai": {"launch": [launch], "startup_timeout_s": 120,
                                                       "api_key_env": "FAKE_SECRET"}}, _rows(3))
    _stage(repo)
    assert len(_keys(repo)) == 4
    assert not port_open(port), "the launched server is still running"
    for f in [repo / "params.yaml", repo / "logs/regenerate/server-0.log", repo / "data/metrics/regenerate.json",
              repo / "data/regen/answers.parquet"]:
        assert b"sk-do-not-log" not in f.read_bytes(), f
    # a failure after launch (wrong model) still stops the server, and names the problem
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["regenerate"]["openai"]["model"] = "nope"
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    bad = _stage(repo, check=False)
    assert bad.returncode == 2 and "'nope' is not served by" in bad.stderr
    assert not port_open(port)
