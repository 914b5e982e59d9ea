"""Prompts longer than the target's context: the stage names, counts and lists them, drops or
cuts them before any batch, and answers the rest (the embedded target given a small context)."""

import json

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ROOT

from draftline.config.params import parse_params

from draftline.config.regenerate import RegenerateParams
from draftline.io import read_json, write_parquet
from draftline.regenerate.context import CUT_MARK, PromptLimit, chat_ids
from draftline.regenerate.drive import HFDriver, answer_all
from draftline.regenerate.hf_backend import HFBackend
from draftline.regenerate.stage import ANSWERS, LONG, run

CONTEXT, NEW = 48, 2  # a few rows of at most 48 tokens: the stage in seconds on a CPU
LIMIT = CONTEXT - NEW
HEAD, TAIL = "Read this: ", " First word?"


@pytest.fixture(scope="module")
def small_target(target_dir, tmp_path_factory):
    """The embedded target, its files linked, with a 48-token max_position_embeddings."""
    d = tmp_path_factory.mktemp("small") / "model"
    d.mkdir()
    for f in target_dir.iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f)
    cfg = json.loads((target_dir / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": CONTEXT}))
    return d


def _row(id, *turns):
    return {"id": id, "source": "s", "category": "chat", "split": "train",
            "messages": [{"role": "user", "content": t} for t in turns]}


def _filler_to(tokenizer, n):
    """A first turn such that the second ("Go on.", earlier answer empty) is exactly n tokens:
    it fits before any answer and outgrows the context once the target's answer is in it."""
    def second(k):
        return len(chat_ids(tokenizer, [{"role": "user", "content": "a " * k}, {"role": "assistant", "content": ""},
                                        {"role": "user", "content": "Go on."}], {}))
    k = max(k for k in range(n) if second(k) <= n)
    assert second(k) == n
    return "a " * k


def _rows(tokenizer):
    return [_row("r0", "Say hello."), _row("big", HEAD + "word " * 2000 + TAIL),
            _row("late", "Pick a number.", "word " * 2000), _row("grow", _filler_to(tokenizer, LIMIT), "Go on.")]


def test_too_long_prompts_are_dropped_named_and_counted(tmp_path, small_target, tokenizer, capsys):
    """The stage itself, the context read from the target's config."""
    write_parquet(tmp_path / "train.parquet", _rows(tokenizer))
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["regenerate"].update(max_new_tokens=NEW, long_prompts="drop", dtype="float32")
    run(parse_params(data), small_target, tmp_path / "train.parquet", tmp_path / "regen", tmp_path / "work",
        tmp_path / "logs", tmp_path / "m.json", device="cpu")
    answers = {r["id"]: r for r in pq.read_table(tmp_path / "regen" / ANSWERS).to_pylist()}
    long, m = pq.read_table(tmp_path / "regen" / LONG).to_pylist(), read_json(tmp_path / "m.json")
    assert list(answers) == ["r0"] and answers["r0"]["completion"]
    # big: its prompt alone; late: its second turn, before any answer; grow: its second turn once
    # the first answer is in it (caught as it is asked)
    assert [(e["id"], e["turn"], e["action"]) for e in long] == [("big", 1, "dropped"), ("late", 2, "dropped"),
                                                                  ("grow", 2, "dropped")]
    assert long[0]["prompt_tokens"] > 2000 and long[2]["prompt_tokens"] > LIMIT == long[0]["limit"]
    assert m["context"] == CONTEXT and m["long_prompts_dropped"] == 3 and m["long_prompts_cut"] == 0
    out = capsys.readouterr().out
    assert "row big (s, sample 0) turn 1:" in out and "row grow (s, sample 0) turn 2:" in out


def test_too_long_prompts_are_cut_to_fit(tmp_path, target_model, tokenizer):
    """The driver with the session's target, given the small context directly."""
    p = RegenerateParams(max_new_tokens=NEW, long_prompts="cut")
    out = answer_all(_rows(tokenizer), HFDriver(HFBackend(target_model, tokenizer, p, [tokenizer.eos_token_id]), 8),
                     p, "fp", tmp_path / "w", limit=PromptLimit(tokenizer, CONTEXT, p))
    answers = {r["id"]: r for r in out.rows}
    assert sorted(answers) == ["big", "grow", "late", "r0"]
    assert [(e["id"], e["turn"], e["action"]) for e in out.long] == [("big", 1, "cut"), ("late", 2, "cut"),
                                                                      ("grow", 2, "cut")]
    # the first turn cut in the middle: its start and its question kept, and it fits
    asked = answers["big"]["messages"][0]["content"]
    assert asked.startswith(HEAD + "word") and asked.endswith(TAIL) and CUT_MARK in asked
    assert LIMIT - 4 <= answers["big"]["prompt_tokens"] <= LIMIT
    # a later turn that does not fit ends the conversation before it; the first is answered
    for id in ("late", "grow"):
        assert [x["role"] for x in answers[id]["messages"]] == ["user", "assistant"]
        assert len(answers[id]["finish_reason"]) == 1
