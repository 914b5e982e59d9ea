"""Generated token ids (`completion_ids`) and thinking traces cut by max_new_tokens, with the
in-process backend and on a loopback server answering with the real target."""

import copy
import json

import pyarrow.parquet as pq
import yaml
from conftest import ROOT
from openai_server import ChatServer

from draftline.config.chat import ChatParams

from draftline.config.params import parse_params

from draftline.config.regenerate import OpenAIParams, RegenerateParams
from draftline.io import read_json, write_parquet
from draftline.regenerate.answer import split_reasoning
from draftline.regenerate.drive import HFDriver, answer_all
from draftline.regenerate.hf_backend import HFBackend
from draftline.regenerate.openai_run import OpenAIDriver
from draftline.regenerate.stage import ANSWERS, DROPPED, run
from draftline.regenerate.store import ShardStore

ROWS = [{"id": f"r{i}", "source": "s", "category": "chat", "split": "train",
         "messages": [{"role": "user", "content": q}]} for i, q in enumerate(["Say hello.", "Name a fruit."])]
MULTI = {"id": "m", "source": "s", "category": "chat", "split": "train",
         "messages": [{"role": "user", "content": "Pick a number."}, {"role": "user", "content": "Double it."}]}
# A thinking template whose generation prompt opens the reasoning block (as Qwen3.6's does).
OPENS_THINK = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


def _openai(url, new=12, **kw):
    return RegenerateParams(backend="openai", max_new_tokens=new, **kw,
                            openai=OpenAIParams(urls=[url], backoff_s=0.01))


def _hf(target_model, tokenizer, tmp_path, new=12, name="hf"):
    p = RegenerateParams(max_new_tokens=new)
    return answer_all(ROWS + [MULTI], HFDriver(HFBackend(target_model, tokenizer, p, [tokenizer.eos_token_id]), 4),
                      p, "fp", tmp_path / name)


def test_hf_stores_the_ids_it_generated(tmp_path, target_model, tokenizer):
    out = _hf(target_model, tokenizer, tmp_path)
    eos = tokenizer.eos_token_id
    for r in out.rows:
        answers = [m["content"] for m in r["messages"] if m["role"] == "assistant"]
        assert len(r["completion_ids"]) == len(answers) == len(r["finish_reason"])
        assert sum(map(len, r["completion_ids"])) == r["completion_tokens"]
        for ids, text, finish in zip(r["completion_ids"], answers, r["finish_reason"]):
            # the stop token the target emitted ends the turn, nothing after it (no padding)
            assert (ids[-1] == eos and eos not in ids[:-1]) if finish == "stop" else (len(ids) == 12 and eos not in ids)
            assert tokenizer.decode(ids[:-1] if finish == "stop" else ids) == text
    assert {"stop", "length"} <= {f for r in out.rows for f in r["finish_reason"]}  # both cases covered
    assert "completion_ids" not in json.loads(out.rows[0]["gen_settings"])


def test_openai_stores_token_ids_when_the_server_returns_them(tmp_path, target_model, tokenizer):
    hf = _hf(target_model, tokenizer, tmp_path)
    with ChatServer(target_model, tokenizer) as srv:
        p = _openai(srv.url)
        with_ids = answer_all(ROWS + [MULTI], OpenAIDriver(p, tmp_path / "logs"), p, "fp", tmp_path / "a")
        asked = list(srv.bodies)
        p_off = _openai(srv.url, token_ids=False)
        without = answer_all(ROWS + [MULTI], OpenAIDriver(p_off, tmp_path / "logs"), p_off, "fp", tmp_path / "b")
    assert all(b["return_token_ids"] is True for b in asked)
    assert "return_token_ids" not in srv.bodies[-1]
    assert [r["completion_ids"] for r in with_ids.rows] == [r["completion_ids"] for r in hf.rows]
    assert all(r["completion_ids"] is None for r in without.rows)
    # the ids are not part of the key: asking for them or not answers the same rows
    assert [r["key"] for r in with_ids.rows] == [r["key"] for r in without.rows]


def test_rows_written_before_the_ids_column_are_reused_with_null_ids(tmp_path, target_model, tokenizer):
    out = _hf(target_model, tokenizer, tmp_path, new=4)
    old = [{k: v for k, v in r.items() if k != "completion_ids"} for r in out.rows]
    ShardStore(tmp_path / "w").append(old[:2])  # an earlier run's shard: no such column
    p = RegenerateParams(max_new_tokens=4)
    again = answer_all(ROWS + [MULTI], HFDriver(HFBackend(target_model, tokenizer, p, [tokenizer.eos_token_id]), 4),
                       p, "fp", tmp_path / "w")
    assert again.stats["rows_resumed"] == 2 and again.stats["rows_generated"] == 1
    assert [r["completion_ids"] for r in again.rows] == [None, None, out.rows[2]["completion_ids"]]
    write_parquet(tmp_path / "answers.parquet", again.rows)  # the old rows first: the column is still written
    assert pq.read_table(tmp_path / "answers.parquet").column("completion_ids").to_pylist()[2] is not None


def test_split_reasoning_cut_traces():
    assert split_reasoning("<think>\nhalf a thou") == ("", "half a thou")
    # the generation prompt opened <think>: no tag in the text at all
    assert split_reasoning("half a thou", opened=True) == ("", "half a thou")
    assert split_reasoning("r\n</think>\n\nb", opened=True) == ("b", "r")
    assert split_reasoning("plain", opened=False) == ("plain", None)


def test_hf_trace_cut_after_an_opened_generation_prompt(tmp_path, target_model, tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = OPENS_THINK
    p = RegenerateParams(max_new_tokens=3)
    out = answer_all(ROWS, HFDriver(HFBackend(target_model, tok, p, [tok.eos_token_id]), 2), p, "fp", tmp_path / "w")
    for r in out.rows:
        assert r["completion"] == "" and r["reasoning"][0] and r["finish_reason"] == ["length"]
        assert tok.decode(r["completion_ids"][0]).strip() == r["reasoning"][0]


def test_openai_trace_cut_inside_reasoning(tmp_path, target_model, tokenizer):
    with ChatServer(target_model, tokenizer, think="open_cut") as srv:
        p = _openai(srv.url, new=4)
        opened = answer_all(ROWS, OpenAIDriver(p, tmp_path / "logs", None, True), p, "fp", tmp_path / "a")
        plain = answer_all(ROWS, OpenAIDriver(p, tmp_path / "logs"), p, "fp", tmp_path / "b")
    for r in opened.rows:
        assert r["completion"] == "" and r["reasoning"][0].startswith("Reasoning:") and r["finish_reason"] == ["length"]
    # a prompt that did not open <think> and text without tags: the text is the answer
    assert all(r["completion"].startswith("Reasoning:") and r["reasoning"] == [None] for r in plain.rows)


def test_stage_counts_and_drops_truncated_traces(tmp_path, target_dir, target_model, tokenizer):
    write_parquet(tmp_path / "train.parquet", ROWS + [MULTI])
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    with ChatServer(target_model, tokenizer, think="cut") as srv:
        def stage(drop: bool) -> dict:
            # check_rows 0: a server that reasons answers no log-probs (test_regenerate_agreement.py)
            data["regenerate"].update(backend="openai", max_new_tokens=4, drop_truncated=drop, check_rows=0)
            data["regenerate"]["openai"] = {"urls": [srv.url], "backoff_s": 0.01}
            data["chat"] = {"thinking": "on"}
            run(parse_params(data), target_dir, tmp_path / "train.parquet", tmp_path / "regen", tmp_path / "work",
                tmp_path / "logs", tmp_path / "m.json", device="cpu")
            return read_json(tmp_path / "m.json")

        kept = stage(False)
        answers = pq.read_table(tmp_path / "regen" / ANSWERS).to_pylist()
        requests = srv.requests
        dropped = stage(True)
    assert srv.requests == requests  # drop_truncated is not part of the key: nothing asked again
    assert all(b["chat_template_kwargs"] == {"enable_thinking": True} for b in srv.bodies)
    assert len(answers) == 3 and all(r["completion"] == "" and all(r["reasoning"]) for r in answers)
    for m in (kept, dropped):  # 4 turns (the two-turn row has 2), every one cut inside its reasoning
        assert (m["truncated"], m["truncated_in_reasoning"], m["truncated_rows"]) == (4, 4, 3)
    assert (kept["rows"], dropped["rows"], dropped["dropped_truncated"]) == (3, 0, 3)
    assert pq.read_table(tmp_path / "regen" / DROPPED).num_rows == 3
    assert ChatParams(thinking="on").template_kwargs() == {"enable_thinking": True}
