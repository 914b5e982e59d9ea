"""The tokenize stage gives every regenerated answer its own sequence id and adds copy turns."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

from draftline.config.params import load_params
from draftline.io import read_parquet, write_parquet
from draftline.sequences import tokenize
from draftline.target.load import load_tokenizer


def _answer(sample: int, text: str) -> dict:
    return {"id": "p1", "split": "train", "sample": sample, "finish_reason": ["stop"],
            "messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": text}]}


@pytest.fixture
def stage_dir(tmp_path, target_dir, monkeypatch):
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run(params, target_dir):
    tokenize.run(params, target_dir, Path("answers.parquet"), Path("tokens.parquet"), Path("tokenize.json"))


def test_samples_of_one_prompt_get_their_own_ids(stage_dir, target_dir):
    write_parquet("answers.parquet", [_answer(0, "Blue is a colour."), _answer(1, "Red."),
                                                 _answer(2, "Green, like grass.")])
    _run(load_params(stage_dir / "params.yaml"), target_dir)
    rows = read_parquet("tokens.parquet")
    assert [r["id"] for r in rows] == ["p1", "p1~1", "p1~2"]
    assert len({tuple(r["input_ids"]) for r in rows}) == 3


def test_a_repeated_answer_is_named(stage_dir, target_dir):
    write_parquet("answers.parquet", [_answer(1, "Red."), _answer(1, "Red again.")])
    with pytest.raises(ValueError, match="answer 'p1~1' appears twice"):
        _run(load_params(stage_dir / "params.yaml"), target_dir)


def _params_with_copies(stage_dir, fraction: float):
    p = load_params(stage_dir / "params.yaml")
    tk = p.tokenize.model_copy(update={"copy_turns": p.tokenize.copy_turns.model_copy(update={"fraction": fraction})})
    return p.model_copy(update={"tokenize": tk})


def test_copy_turns_repeat_the_answer_under_the_same_id(stage_dir, target_dir):
    rows = [_answer(0, "Blue is a colour."),
            {**_answer(0, "Red."), "id": "p2", "split": "val"},
            {**_answer(0, "Green."), "id": "p3", "finish_reason": ["stop", "stop"],
             "messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Green."},
                          {"role": "user", "content": "Another?"}, {"role": "assistant", "content": "Teal."}]}]
    write_parquet("answers.parquet", rows)
    _run(_params_with_copies(stage_dir, 0.0), target_dir)
    plain = read_parquet("tokens.parquet")
    _run(_params_with_copies(stage_dir, 1.0), target_dir)
    copied = read_parquet("tokens.parquet")
    assert [r["id"] for r in copied] == ["p1", "p2", "p3"]
    # Only the single-turn training row changes: val rows and multi-turn rows stay as they were.
    assert copied[1]["input_ids"] == plain[1]["input_ids"] and copied[2]["input_ids"] == plain[2]["input_ids"]
    tok = load_tokenizer(target_dir)
    ids, mask = copied[0]["input_ids"], copied[0]["loss_mask"]
    text = tok.decode(ids)
    assert text.count("Blue is a colour.") == 2
    assert any(req in text for req in load_params(stage_dir / "params.yaml").tokenize.copy_turns.requests)
    # Both answers are supervised: twice the first run's supervised tokens.
    assert sum(mask) == 2 * sum(plain[0]["loss_mask"])
    assert json.loads(Path("tokenize.json").read_text())["copy_turns"] == 1
