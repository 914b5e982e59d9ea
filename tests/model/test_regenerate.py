"""Regeneration logic on a loopback server answering with the real target (transformers),
and resume by content key with the in-process backend."""

import json

import pytest
from openai_server import ChatServer

from draftline.config.chat import ChatParams

from draftline.config.regenerate import OpenAIParams, RegenerateParams
from draftline.regenerate.answer import split_reasoning
from draftline.regenerate.client import EndpointError
from draftline.regenerate.drive import HFDriver, answer_all
from draftline.regenerate.hf_backend import HFBackend
from draftline.regenerate.openai_run import OpenAIDriver

ROWS = [{"id": f"r{i}", "source": "s", "category": "chat", "split": "train",
         "messages": [{"role": "user", "content": q}]} for i, q in enumerate(["Say hello.", "Name a fruit."])]
MULTI = {"id": "m", "source": "s", "category": "chat", "split": "train",
         "messages": [{"role": "user", "content": "Pick a number."}, {"role": "user", "content": "Double it."}]}


def _openai(url, regen=None, **kw):
    kw.setdefault("backoff_s", 0.01)
    return RegenerateParams(backend="openai", max_new_tokens=12, **(regen or {}),
                            openai=OpenAIParams(urls=[url], **kw))


def _drive(p, tmp_path, name="w", chat=None, opened=False, rows=None):
    return answer_all(rows or ROWS + [MULTI], OpenAIDriver(p, tmp_path / "logs", chat, opened), p, "fp",
                      tmp_path / name)


def test_retries_key_from_env_and_turn_by_turn(tmp_path, target_model, tokenizer, monkeypatch):
    monkeypatch.setenv("TEST_KEY", "sk-secret")
    with ChatServer(target_model, tokenizer, fail_first=2) as srv:
        p = _openai(srv.url, api_key_env="TEST_KEY", max_retries=3, max_in_flight=2)
        out = _drive(p, tmp_path)
    assert srv.requests == 2 + 4  # two injected 500s were retried; the 2-turn row made 2 calls
    assert out.stats["retries"] == {"http_5xx": 2} and not out.errors
    assert set(srv.auth_headers) == {"Bearer sk-secret"}
    assert [r["id"] for r in out.rows] == ["r0", "r1", "m"]
    assert all(r["completion"] and r["served_model"] == "smollm2" and r["gen_model"] == "smollm2" for r in out.rows)
    m = out.rows[2]["messages"]
    # turn by turn: the second question is asked on top of the target's own first answer
    assert [x["role"] for x in m] == ["user", "assistant", "user", "assistant"]
    assert srv.bodies[-1]["messages"][1]["content"] == m[1]["content"]
    assert "sk-secret" not in str(out.rows) + str(out.stats) + str(p.model_dump())


def test_openai_and_hf_backends_agree(tmp_path, target_model, tokenizer):
    hp = RegenerateParams(max_new_tokens=12)
    hf = answer_all(ROWS, HFDriver(HFBackend(target_model, tokenizer, hp, [tokenizer.eos_token_id]), 2), hp, "fp",
                    tmp_path / "a")
    with ChatServer(target_model, tokenizer) as srv:
        p = _openai(srv.url)
        oa = answer_all(ROWS, OpenAIDriver(p, tmp_path), p, "fp", tmp_path / "b")
    assert [r["completion"] for r in hf.rows] == [r["completion"] for r in oa.rows]


@pytest.mark.parametrize("think", ["field", "tags"])
def test_thinking_kwargs_sent_and_reasoning_kept_apart(tmp_path, target_model, tokenizer, think):
    with ChatServer(target_model, tokenizer, think=think) as srv:
        p = _openai(srv.url, extra_body={"top_k": 20})
        chat = ChatParams(thinking="on", chat_template_kwargs={"reasoning_effort": "low"})
        out = _drive(p, tmp_path, chat=chat)
    assert all(b["chat_template_kwargs"] == {"reasoning_effort": "low", "enable_thinking": True} and b["top_k"] == 20
               for b in srv.bodies)
    for r in out.rows:
        assert r["reasoning"] == ["Reasoning: " + a["content"] for a in r["messages"] if a["role"] == "assistant"]
        assert "<think>" not in r["completion"] and "Reasoning:" not in r["completion"]
        # stored messages keep the answer only: the reasoning is in its own column
        assert all(set(m) == {"role", "content"} for m in r["messages"])
    # the second turn was asked with the first answer's reasoning in the history, where a
    # template that keeps earlier reasoning renders it (and one that drops it drops it)
    m = next(r for r in out.rows if r["id"] == "m")
    assert srv.bodies[-1]["messages"][1] == {"role": "assistant", "content": m["messages"][1]["content"],
                                             "reasoning_content": m["reasoning"][0]}
    # thinking is part of the key: the same prompts with thinking off are other rows
    from draftline.regenerate.jobs import settings_of
    off = ChatParams(thinking="off")
    assert settings_of(p, "smollm2", off)["chat_template_kwargs"] == {"enable_thinking": False}
    assert settings_of(p, "smollm2", chat) != settings_of(p, "smollm2", off)
    assert out.rows[0]["gen_settings"] == json.dumps(settings_of(p, "smollm2", chat), sort_keys=True)


def test_split_reasoning_variants():
    assert split_reasoning("<think> a </think>\n\nb") == ("b", "a")
    assert split_reasoning("a\n</think>\n\nb") == ("b", "a")  # template opened <think> itself
    assert split_reasoning("<think> still thinking") == ("", "still thinking")  # truncated
    assert split_reasoning("plain") == ("plain", None)
    assert split_reasoning("b", "r") == ("b", "r")


def test_missing_api_key_env_is_named(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(EndpointError, match="NO_SUCH_KEY"):
        OpenAIDriver(_openai("http://127.0.0.1:1/v1", api_key_env="NO_SUCH_KEY"), None)


class Counting:
    """Wraps a backend and counts the conversations it was asked to answer."""

    def __init__(self, inner, fail_after=None):
        self.inner, self.calls, self.fail_after = inner, 0, fail_after

    def generate(self, convs, seed, **kw):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("killed")
        self.calls += len(convs)
        return self.inner.generate(convs, seed, **kw)


def test_resume_skips_done_rows_and_ignores_other_settings(tmp_path, target_model, tokenizer):
    rows = [{**ROWS[0], "id": f"q{i}", "messages": [{"role": "user", "content": f"Say the number {i}."}]}
            for i in range(6)]
    p = RegenerateParams(max_new_tokens=8, shard_rows=2)
    hf = HFBackend(target_model, tokenizer, p, [tokenizer.eos_token_id])
    work = tmp_path / "w"
    interrupted = Counting(hf, fail_after=4)
    with pytest.raises(KeyboardInterrupt):
        answer_all(rows, HFDriver(interrupted, 2), p, "fp", work)
    resumed = Counting(hf)
    out = answer_all(rows, HFDriver(resumed, 2), p, "fp", work)
    assert out.stats["rows_resumed"] == 4 and resumed.calls == 2
    assert sorted(r["id"] for r in out.rows) == sorted(r["id"] for r in rows)
    full = answer_all(rows, HFDriver(hf, 2), p, "fp", tmp_path / "fresh")
    assert [r["completion"] for r in out.rows] == [r["completion"] for r in full.rows]
    # other settings: nothing is reused
    p2 = RegenerateParams(max_new_tokens=9, shard_rows=2)
    again = Counting(HFBackend(target_model, tokenizer, p2, [tokenizer.eos_token_id]))
    out2 = answer_all(rows, HFDriver(again, 2), p2, "fp", work)
    assert out2.stats["rows_resumed"] == 0 and again.calls == 6


def test_samples_need_temperature():
    import yaml
    from conftest import ROOT

    from draftline.config.base import ParamsError

    from draftline.config.params import parse_params

    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["regenerate"]["samples_per_prompt"] = 2
    with pytest.raises(ParamsError, match="regenerate.*samples_per_prompt > 1 needs temperature"):
        parse_params(data)


class Batches:
    """Records the size of every generate call."""

    def __init__(self, inner):
        self.inner, self.sizes = inner, []

    def generate(self, convs, seed, **kw):
        self.sizes.append(len(convs))
        return self.inner.generate(convs, seed, **kw)


def test_hf_batches_group_conversations_by_turn_count(tmp_path, target_model, tokenizer):
    # By length alone each batch of 2 would pair a one-turn and a two-turn conversation
    # and spend a second generate call on one row.
    one = [{**ROWS[0], "id": f"o{i}", "messages": [{"role": "user", "content": "Hi." * (1 + 3 * i)}]}
           for i in range(2)]
    two = [{**MULTI, "id": f"t{i}", "messages": [{"role": "user", "content": "Hey." * (1 + 3 * i)},
                                                 {"role": "user", "content": "Again."}]} for i in range(2)]
    p = RegenerateParams(max_new_tokens=4)
    rec = Batches(HFBackend(target_model, tokenizer, p, [tokenizer.eos_token_id]))
    out = answer_all([one[0], two[0], one[1], two[1]], HFDriver(rec, 2), p, "fp", tmp_path / "w")
    assert rec.sizes == [2, 2, 2]  # the one-turn pair, then both turns of the two-turn pair
    assert [r["id"] for r in out.rows] == ["o0", "t0", "o1", "t1"]  # prompt order kept
    assert [len(r["messages"]) for r in out.rows] == [2, 4, 2, 4]
