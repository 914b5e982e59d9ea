"""The tokenize stage gives every regenerated answer its own sequence id."""

import os
import shutil

import pytest

from conftest import ROOT
from draftline.config import load_params
from draftline.io import read_parquet, write_parquet
from stages import tokenize


def _answer(sample: int, text: str) -> dict:
    return {"id": "p1", "split": "train", "sample": sample, "finish_reason": ["stop"],
            "messages": [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": text}]}


@pytest.fixture
def stage_dir(tmp_path, target_dir, monkeypatch):
    (tmp_path / "data/target").mkdir(parents=True)
    os.symlink(target_dir, tmp_path / "data/target/model")
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_samples_of_one_prompt_get_their_own_ids(stage_dir):
    write_parquet("data/regen/answers.parquet", [_answer(0, "Blue is a colour."), _answer(1, "Red."),
                                                 _answer(2, "Green, like grass.")])
    tokenize.run(load_params(stage_dir / "params.yaml"))
    rows = read_parquet("data/tokens/train.parquet")
    assert [r["id"] for r in rows] == ["p1", "p1~1", "p1~2"]
    assert len({tuple(r["input_ids"]) for r in rows}) == 3


def test_a_repeated_answer_is_named(stage_dir):
    write_parquet("data/regen/answers.parquet", [_answer(1, "Red."), _answer(1, "Red again.")])
    with pytest.raises(ValueError, match="answer 'p1~1' appears twice"):
        tokenize.run(load_params(stage_dir / "params.yaml"))
