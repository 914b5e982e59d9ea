"""Regeneration against a real HTTP server on loopback, and resume by content key."""

import socket
import time

import pytest

from draftline.config import OpenAIParams, RegenerateParams
from draftline.regenerate.hf_backend import HFBackend
from draftline.regenerate.openai_backend import EndpointError, OpenAIBackend
from draftline.regenerate.run import regenerate

from openai_server import ChatServer

ROWS = [{"id": f"r{i}", "source": "s", "category": "chat", "split": "train",
         "messages": [{"role": "user", "content": q}]} for i, q in enumerate(["Say hello.", "Name a fruit."])]
MULTI = {"id": "m", "source": "s", "category": "chat", "split": "train",
         "messages": [{"role": "user", "content": "Pick a number."}, {"role": "user", "content": "Double it."}]}


def _openai(url, **kw):
    return RegenerateParams(backend="openai", max_new_tokens=12, openai=OpenAIParams(url=url, **kw))


def test_openai_backend_against_loopback_server(tmp_path, target_model, tokenizer, monkeypatch):
    monkeypatch.setenv("TEST_KEY", "sk-secret")
    with ChatServer(target_model, tokenizer, fail_first=2) as srv:
        p = _openai(srv.url, api_key_env="TEST_KEY", backoff_s=0.01, max_retries=3, concurrency=2)
        rows, stats = regenerate(ROWS + [MULTI], OpenAIBackend(p), p, "fp", tmp_path / "w", 2)
    assert srv.requests == 2 + 4  # two injected 500s were retried; the 2-turn row made 2 calls
    assert set(srv.auth_headers[-1:]) == {"Bearer sk-secret"}
    assert [r["id"] for r in rows] == ["r0", "r1", "m"]
    assert all(r["completion"] and r["served_model"] == "smollm2" for r in rows)
    m = rows[2]["messages"]
    # turn by turn: the second question is asked on top of the target's own first answer
    assert [x["role"] for x in m] == ["user", "assistant", "user", "assistant"]
    assert "sk-secret" not in str(rows) + str(stats)


def test_openai_and_hf_backends_agree(tmp_path, target_model, tokenizer):
    hp = RegenerateParams(max_new_tokens=12)
    hf_rows, _ = regenerate(ROWS, HFBackend(target_model, tokenizer, hp, [tokenizer.eos_token_id]), hp, "fp",
                            tmp_path / "a", 2)
    with ChatServer(target_model, tokenizer) as srv:
        p = _openai(srv.url)
        oa_rows, _ = regenerate(ROWS, OpenAIBackend(p), p, "fp", tmp_path / "b", 2)
    assert [r["completion"] for r in hf_rows] == [r["completion"] for r in oa_rows]


def test_unreachable_endpoint_fails_with_url_in_bounded_time(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now
    p = _openai(f"http://127.0.0.1:{port}/v1", max_retries=2, backoff_s=0.05, timeout_s=2)
    t0 = time.time()
    with pytest.raises(EndpointError, match=f"http://127.0.0.1:{port}/v1/chat/completions: failed after 3 attempts"):
        regenerate(ROWS, OpenAIBackend(p), p, "fp", tmp_path / "w", 2)
    assert time.time() - t0 < 30


def test_missing_api_key_env_is_named(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with pytest.raises(EndpointError, match="NO_SUCH_KEY"):
        OpenAIBackend(_openai("http://127.0.0.1:1/v1", api_key_env="NO_SUCH_KEY"))


class Counting:
    """Wraps a backend and counts the conversations it was asked to answer."""

    def __init__(self, inner, fail_after=None):
        self.inner, self.calls, self.fail_after = inner, 0, fail_after

    def generate(self, convs, seed):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("killed")
        self.calls += len(convs)
        return self.inner.generate(convs, seed)


def test_resume_skips_done_rows_and_ignores_other_settings(tmp_path, target_model, tokenizer):
    rows = [{**ROWS[0], "id": f"q{i}", "messages": [{"role": "user", "content": f"Say the number {i}."}]}
            for i in range(6)]
    p = RegenerateParams(max_new_tokens=8, shard_rows=2)
    hf = HFBackend(target_model, tokenizer, p, [tokenizer.eos_token_id])
    work = tmp_path / "w"
    interrupted = Counting(hf, fail_after=4)
    with pytest.raises(KeyboardInterrupt):
        regenerate(rows, interrupted, p, "fp", work, 2)
    resumed = Counting(hf)
    out, stats = regenerate(rows, resumed, p, "fp", work, 2)
    assert stats["rows_resumed"] == 4 and resumed.calls == 2
    assert sorted(r["id"] for r in out) == sorted(r["id"] for r in rows)
    full, _ = regenerate(rows, hf, p, "fp", tmp_path / "fresh", 2)
    assert [r["completion"] for r in out] == [r["completion"] for r in full]
    # other settings: nothing is reused
    p2 = RegenerateParams(max_new_tokens=9, shard_rows=2)
    again = Counting(HFBackend(target_model, tokenizer, p2, [tokenizer.eos_token_id]))
    _, stats2 = regenerate(rows, again, p2, "fp", work, 2)
    assert stats2["rows_resumed"] == 0 and again.calls == 6
