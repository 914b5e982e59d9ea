import json

import pytest
from prompt_helpers import load_source

from draftline.config.download import SourceParams
from draftline.decode.requests import select_prompts
from draftline.prompts.sources import SourceError


def test_benchmarks_ship_in_packages():
    he, rep = load_source(SourceParams(name="humaneval", kind="humaneval", role="eval"))
    mt, _ = load_source(SourceParams(name="mtbench", kind="mtbench", role="eval"))
    assert len(he) == 164 and rep.rows_kept == 164
    assert len(mt) == 80
    assert all(len(r["messages"]) == 2 for r in mt)  # MT-Bench: two user turns
    assert {r["role"] for r in he + mt} == {"eval"}


def test_local_jsonl_maps_schema_and_skips_bad_rows(tmp_path):
    f = tmp_path / "p.jsonl"
    rows = [
        {"category": "chat", "messages": [{"role": "user", "content": "Hi there"}]},
        {"category": "chat", "messages": [{"role": "assistant", "content": "no user turn"}]},
        {"category": "math", "prompt": "What is 2+2?"},
        {"messages": [{"role": "user", "content": "no category"}]},
        {"category": "chat", "conversations": []},
    ]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    got, rep = load_source(SourceParams(name="mine", kind="local", path=str(f)))
    # the row without a category gets one by the documented rule
    assert [r["category"] for r in got] == ["chat", "math", "chat"]
    assert got[1]["messages"] == [{"role": "user", "content": "What is 2+2?"}]
    assert rep.rows_read == 6 and rep.rows_kept == 3
    assert rep.skipped["no user message"] == 1
    assert sum(rep.skipped.values()) == 3
    assert (2, "no user message") in rep.examples  # row numbers point into the file


def test_assistant_turns_are_dropped(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"category": "chat", "conversations": [
        {"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}, {"from": "human", "value": "c"}]}))
    got, _ = load_source(SourceParams(name="sg", kind="local", path=str(f), messages_field="conversations"))
    assert got[0]["messages"] == [{"role": "user", "content": "a"}, {"role": "user", "content": "c"}]


def test_missing_file_is_named(tmp_path):
    with pytest.raises(SourceError, match="source file not found: .*missing.jsonl"):
        load_source(SourceParams(name="x", kind="local", path=str(tmp_path / "missing.jsonl")))


def test_parquet_and_max_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "p.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": f"q{i}", "category": "chat"} for i in range(10)]), f)
    got, _ = load_source(SourceParams(name="pq", kind="local", path=str(f), max_rows=3))
    assert len(got) == 3


def test_hf_kind_streams_a_dataset_folder(tmp_path):
    # A dataset folder in the hub layout, read by `datasets` exactly as a hub id would be.
    d = tmp_path / "ds" / "data"
    d.mkdir(parents=True)
    (d / "train-00000.jsonl").write_text("\n".join(json.dumps(
        {"conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": "answer"}],
         "category": "chat"}) for i in range(5)))
    src = SourceParams(name="sharegpt", kind="hf", path=str(tmp_path / "ds"), split="train",
                       messages_field="conversations", max_rows=4)
    got, rep = load_source(src)
    assert len(got) == 4 and got[0]["messages"] == [{"role": "user", "content": "question 0"}]


def test_hf_kind_unknown_dataset_is_named(tmp_path):
    src = SourceParams(name="nope", kind="hf", path="no-such-org/no-such-dataset", revision="abc123")
    with pytest.raises(SourceError, match="source 'nope': cannot open dataset"):
        load_source(src)


def test_hub_read_needs_a_pinned_revision():
    with pytest.raises(SourceError, match="source 'gsm': set 'revision'"):
        load_source(SourceParams(name="gsm", kind="gsm8k"))


def test_split_source_holds_out_the_benchmarks_first_prompts():
    he, rep = load_source(SourceParams(name="humaneval", kind="humaneval", role="split", holdout=8))
    held = [r["id"] for r in he if r["role"] == "eval"]
    # numeric order, as the benchmark takes them: humaneval-0..7, never humaneval-10
    assert held == [f"humaneval-{i}" for i in range(8)]
    assert [r["id"] for r in select_prompts(he, 8)] == held  # the benchmark scores exactly these
    assert sum(r["role"] == "train" for r in he) == 156 and rep.rows_kept == 164
    mt, _ = load_source(SourceParams(name="mtbench", kind="mtbench", role="split", holdout=8))
    assert [r["id"] for r in mt if r["role"] == "eval"] == [f"mtbench-{i}" for i in range(81, 89)]


@pytest.mark.parametrize("src", [{"role": "split"}, {"role": "eval", "holdout": 8}])
def test_holdout_goes_with_split(src):
    with pytest.raises(ValueError, match="holdout"):
        SourceParams(name="humaneval", kind="humaneval", **src)
