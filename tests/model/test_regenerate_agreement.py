"""The agreement check (regenerate/agreement.py): the in-process target against the backend
that wrote the answers, on the embedded SmolLM2 target. In process, on a loopback server
answering as vLLM does, and on real llama.cpp servers serving its GGUF as converted, in
another quantisation and with another chat template. Each test prints the figures it
measured (`pytest -s` shows them)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from conftest import ROOT
from llama_server import LlamaServer, requantized
from openai_server import ChatServer

from draftline.config.params import parse_params
from draftline.config.regenerate import RegenerateParams
from draftline.io import read_json, write_parquet
from draftline.regenerate.drive import HFDriver, answer_all
from draftline.regenerate.hf_backend import HFBackend
from draftline.regenerate.stage import ANSWERS, DISAGREED, run

QUESTIONS = ["Name a fruit.", "Write a haiku about the sea.", "What is 2+2?", "Describe a cat in one sentence.",
             "Why is the sky blue?", "Give one tip for sleeping well."]
ROWS = [{"id": f"q{i}", "source": "s", "category": "chat", "split": "train",
         "messages": [{"role": "user", "content": q}]} for i, q in enumerate(QUESTIONS)]
ROWS.append({"id": "multi", "source": "s", "category": "chat", "split": "train",
             "messages": [{"role": "user", "content": "Pick a number."}, {"role": "user", "content": "Double it."}]})


def _stage(tmp_path, target_dir, regen: dict, openai: dict | None = None, rows=ROWS):
    """The stage in this process; (metrics, the error it raised or None)."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["regenerate"] |= {"max_new_tokens": 16, "batch_size": 8, "shard_rows": 2, **regen}
    if openai is not None:
        params["regenerate"] |= {"backend": "openai", "max_context": 512}
        params["regenerate"]["openai"] |= {"max_in_flight": 1, "backoff_s": 0.01, "startup_timeout_s": 60.0,
                                           **openai}
    write_parquet(tmp_path / "mix.parquet", rows)
    err = None
    try:
        run(parse_params(params), target_dir, tmp_path / "mix.parquet", tmp_path / "out", tmp_path / "work",
            tmp_path / "logs", tmp_path / "m.json", device=torch.device("cpu"))
    except RuntimeError as e:
        err = e
    m = read_json(tmp_path / "m.json")["agreement"]
    print(f"\nagreement {tmp_path.name}: top-1 {m['top1']}, mean |dlogprob| {m['mean_abs_dlogprob']}, p99 "
          f"{m['p99_abs_dlogprob']}, max {m['max_abs_dlogprob']} over {m['tokens']} tokens of {m['rows']} rows "
          f"({m['dtype']}; {m['reason'] or 'measured'})")
    return m, err


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_recording_log_probs_changes_no_answer(target_model, tokenizer, temperature):
    p = RegenerateParams(max_new_tokens=12, temperature=temperature)
    backend = HFBackend(target_model, tokenizer, p, [tokenizer.eos_token_id])
    convs = [r["messages"][:1] for r in ROWS[:4]]
    plain = backend.generate(convs, [1, 2, 3, 4])
    scored = backend.generate(convs, [1, 2, 3, 4], scored=[True, False, True, True])
    assert [a.token_ids for a in plain] == [a.token_ids for a in scored]
    assert [a.logprobs is not None for a in scored] == [True, False, True, True]
    for a in (scored[0], scored[2], scored[3]):
        assert len(a.logprobs) == len(a.top1) == len(a.token_ids) and all(lp <= 0 for lp in a.logprobs)
        if temperature == 0:  # greedy emits the top-1 token
            assert a.top1 == [f"token_id:{i}" for i in a.token_ids]
    if temperature > 0:  # sampled: some token was not the likeliest, or the test shows nothing
        assert any(t != f"token_id:{i}" for a in scored if a.top1 for t, i in zip(a.top1, a.token_ids))


def test_hf_backend_agrees_with_itself(tmp_path, target_dir):
    # float32: the same model, batched and padded against one unpadded pass, agrees to rounding
    m, err = _stage(tmp_path, target_dir, {"dtype": "float32", "check_rows": 5})
    assert err is None
    assert (m["sampled"], m["rows"], m["rows_without_logprobs"], m["unmatched_turns"]) == (5, 5, 0, 0)
    assert m["reason"] is None
    assert m["tokens"] > 40 and m["top1"] == 1.0 and m["max_abs_dlogprob"] < 1e-3 and m["dtype"] == "float32"
    rows = pq.read_table(tmp_path / "out" / ANSWERS).to_pylist()
    # the sample alone carries log-probs, one per generated id of each turn
    scored = [r for r in rows if r["completion_logprobs"] is not None]
    assert len(scored) == 5 and len(rows) == len(ROWS)
    for r in scored:
        assert [len(x) for x in r["completion_logprobs"]] == [len(x) for x in r["completion_ids"]]
    assert "logprob" not in json.loads(rows[0]["gen_settings"])  # not part of the key


def test_a_sampled_row_resumed_without_log_probs_is_answered_again(tmp_path, target_model, tokenizer):
    off = RegenerateParams(max_new_tokens=8, check_rows=0)
    backend = HFBackend(target_model, tokenizer, off, [tokenizer.eos_token_id])
    first = answer_all(ROWS, HFDriver(backend, 8), off, "fp", tmp_path / "w")
    assert all(r["completion_logprobs"] is None for r in first.rows)
    on = RegenerateParams(max_new_tokens=8, check_rows=2)
    again = answer_all(ROWS, HFDriver(backend, 8), on, "fp", tmp_path / "w")
    assert again.stats["check_rows_answered_again"] == 2 and again.stats["rows_resumed"] == len(ROWS) - 2
    assert {r["key"] for r in again.rows if r["completion_logprobs"]} == again.sample
    # the same answers: recording log-probs is not a generation setting
    assert [r["completion"] for r in again.rows] == [r["completion"] for r in first.rows]


@pytest.mark.parametrize("token_ids", [True, False], ids=["named-by-id", "named-by-text"])
def test_a_vllm_like_server_agrees(tmp_path, target_dir, target_model, tokenizer, token_ids):
    with ChatServer(target_model, tokenizer) as srv:
        m, err = _stage(tmp_path, target_dir, {"dtype": "float32", "token_ids": token_ids}, {"urls": [srv.url]})
    assert err is None and m["reason"] is None and m["rows"] == len(ROWS)
    assert m["top1"] == 1.0 and m["max_abs_dlogprob"] < 1e-3
    asked = [b for b in srv.bodies if b.get("logprobs")]
    assert len(asked) == len(ROWS) + 1 and all(b["top_logprobs"] == 1 for b in asked)  # the sample only, every turn
    assert all(b.get("return_tokens_as_token_ids", False) == token_ids for b in asked)


def test_a_server_without_log_probs_fails_unless_told(tmp_path, target_dir, target_model, tokenizer):
    with ChatServer(target_model, tokenizer, logprobs=False) as srv:
        m, err = _stage(tmp_path / "required", target_dir, {}, {"urls": [srv.url]})
        assert err is not None and "agreement check could not run" in str(err)
        assert "returned no log-probs for any of the 7 sampled rows" in str(err)
        assert "regenerate.check_required" in str(err) and m["top1"] is None
        assert not (tmp_path / "required/out" / ANSWERS).exists()
        m, err = _stage(tmp_path / "optional", target_dir, {"check_required": False}, {"urls": [srv.url]})
    assert err is None and m["reason"].startswith("the backend returned no log-probs")
    assert (tmp_path / "optional/out" / ANSWERS).exists()


def test_no_weights_in_the_target_folder_is_named(tmp_path, target_dir, target_model, tokenizer):
    import shutil

    folder = tmp_path / "model"  # a folder with the tokenizer and config only: no target to check with
    shutil.copytree(target_dir, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    with ChatServer(target_model, tokenizer) as srv:
        m, err = _stage(tmp_path, folder, {}, {"urls": [srv.url]})
    assert err is not None and "the in-process target could not be loaded" in str(err)


# -- llama.cpp: the embedded GGUF as converted, requantized, and behind another chat template --


def _llama(tmp_path, target_dir, name: str, regen: dict | None = None, **server):
    with LlamaServer(**server) as srv:
        return _stage(tmp_path / name, target_dir, {"dtype": "float32", **(regen or {})}, {"urls": [srv.url]})


def test_llama_cpp_serving_the_same_gguf_passes(tmp_path, target_dir):
    m, err = _llama(tmp_path, target_dir, "q4_1")
    assert err is None and m["reason"] is None
    assert m["rows"] == len(ROWS) and m["tokens"] > 60 and m["unmatched_turns"] <= 1
    assert m["top1"] >= m["min_top1"] and m["mean_abs_dlogprob"] < 0.2


def test_llama_cpp_serving_another_quantization_fails(tmp_path, target_dir):
    m, err = _llama(tmp_path, target_dir, "q2_k", model=requantized("Q2_K"))
    assert err is not None and "below regenerate.min_top1_agreement 0.9" in str(err), err
    assert m["reason"] is None and m["top1"] < m["min_top1"]
    # its answers are not resumed by the next run: they are set aside, and no answers file is written
    work = tmp_path / "q2_k/work"
    assert not list(work.glob("part-*.parquet")) and list((work / DISAGREED).rglob("part-*.parquet"))
    assert not (tmp_path / "q2_k/out" / ANSWERS).exists()
    # the server fixed, the rerun answers every row afresh and passes
    m, err = _llama(tmp_path, target_dir, "q2_k")
    assert err is None and m["top1"] >= m["min_top1"]
    assert read_json(tmp_path / "q2_k/m.json")["rows_resumed"] == 0


def test_llama_cpp_with_another_chat_template_fails(tmp_path, target_dir):
    m, err = _llama(tmp_path, target_dir, "llama2", extra=["--chat_format", "llama-2"])
    assert err is not None and "below regenerate.min_top1_agreement 0.9" in str(err), err
    assert m["top1"] < m["min_top1"]
