"""A resume source that cannot be read (a truncated persisted output, a damaged shard or
checkpoint) is set aside, named, and the stage goes on from what it can read."""

import torch

from draftline.drafter import checkpoint
from draftline.io import write_parquet
from draftline.regenerate.store import DAMAGED, ShardStore


def test_a_truncated_answers_file_is_set_aside_and_the_shards_still_count(tmp_path, capsys):
    work, out = tmp_path / "regen_work", tmp_path / "regen"
    store = ShardStore(work)
    store.append([{"key": "a", "v": 1}])
    answers = out / "answers.parquet"
    write_parquet(answers, [{"key": "b", "v": 2}])
    answers.write_bytes(answers.read_bytes()[:20])  # as a full disk or `truncate` leaves it

    done = store.load({"a", "b"}, finished=[answers])
    assert set(done) == {"a"}  # b is answered again; a comes from its shard
    assert not answers.exists()
    [aside] = (work / DAMAGED).iterdir()
    assert aside.name.startswith("answers.parquet.") and aside.stat().st_size == 20
    line = capsys.readouterr().out
    assert f"{answers} is unreadable" in line and str(aside) in line
    store.clear()
    assert aside.exists()  # kept for a post-mortem after the run completes


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(tmp_path):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    checkpoint.save(tmp_path, 10, "fp", model.state_dict(), opt.state_dict(), {"steps": []}, keep=3)
    newest = checkpoint.save(tmp_path, 20, "fp", model.state_dict(), opt.state_dict(), {"steps": []}, keep=3)
    newest.write_bytes(newest.read_bytes()[:100])
    state = checkpoint.latest(tmp_path, "fp")
    assert state is not None and state["step"] == 10
    assert not newest.exists() and len(list((tmp_path / "damaged").iterdir())) == 1
