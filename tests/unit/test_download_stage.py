"""The download stage on frames: a Parquet prompt column mapped by frame operations gives
the rows and the report that mapping row by row gives; batches of any size give the same
file; the stage records what it cost."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ROOT
from prompt_helpers import load_source

from draftline.config.download import SourceParams

from draftline.config.params import parse_params
from draftline.io import write_parquet
from draftline.prompts import download, schema, sources

ROWS = [
    {"prompt": "Write a poem about the rain in Spain", "category": None},
    {"prompt": None, "category": "chat"},
    {"prompt": "   \n", "category": "chat"},
    {"prompt": "def f(x): return x  # fix the bug", "category": ""},
    {"prompt": "What is 2+2?", "category": "math"},
    {"prompt": "Какая сегодня погода в Москве?", "category": None},
]


def _files(tmp_path):
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "p.parquet")
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    return tmp_path / "p.parquet", tmp_path / "p.jsonl"


def test_prompt_column_as_frames_equals_row_by_row(tmp_path):
    parquet, jsonl = _files(tmp_path)
    by_frame, rep_f = load_source(SourceParams(name="s", kind="local", path=str(parquet)))
    by_row, rep_r = load_source(SourceParams(name="s", kind="local", path=str(jsonl)))
    assert by_frame == by_row
    assert [r["category"] for r in by_frame] == ["writing", "coding", "math", "multilingual"]
    assert (rep_f.rows_read, rep_f.rows_kept, rep_f.skipped, sorted(rep_f.examples)) == \
        (rep_r.rows_read, rep_r.rows_kept, rep_r.skipped, sorted(rep_r.examples))
    assert rep_f.skipped == {"no 'messages' or 'prompt' field": 1, "no user message": 1}
    assert (2, "no 'messages' or 'prompt' field") in rep_f.examples  # row numbers point into the file


@pytest.mark.parametrize("batch", [1, 2, 4])
def test_any_batch_size_writes_the_same_file(tmp_path, monkeypatch, batch):
    parquet, _ = _files(tmp_path)
    params = parse_params({**yaml.safe_load((ROOT / "params.yaml").read_text()), "download": {"sources": [
        {"name": "s", "kind": "local", "path": str(parquet)},
        {"name": "humaneval", "kind": "humaneval", "role": "split", "holdout": 8, "category": "humaneval"}]}})
    download.run(params, [tmp_path], tmp_path / "one.parquet", tmp_path / "one.json")
    monkeypatch.setattr(sources, "BATCH", batch)
    download.run(params, [tmp_path], tmp_path / "many.parquet", tmp_path / "many.json")
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "many.parquet").read_bytes()
    # The same bytes as the rows written in one piece (the layout the stage has always had).
    rows = [r for s in params.download.sources for r in load_source(s)[0]]
    write_parquet(tmp_path / "rows.parquet", rows)
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "rows.parquet").read_bytes()
    assert pq.read_schema(tmp_path / "one.parquet") == schema.PROMPTS
    m = json.loads((tmp_path / "many.json").read_text())
    assert m["total"] == 4 + 164 and m["sources"]["s"]["skipped"] == 2
    assert m["cost"]["rows_per_second"] > 0 and m["cost"]["peak_rss_mb"] > 0


def test_frames_become_row_groups_of_the_set_size(tmp_path):
    df = schema.frame([{"id": f"r{i}", "source": "s", "category": "chat", "role": "train",
                        "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(10)])
    with schema.ParquetOut(tmp_path / "o.parquet", schema.PROMPTS, group_rows=4) as out:
        for lo in range(0, 10, 3):
            out.write(df[lo : lo + 3])
    f = pq.ParquetFile(tmp_path / "o.parquet")
    assert [f.metadata.row_group(i).num_rows for i in range(f.num_row_groups)] == [4, 4, 2]
    assert f.read().to_pylist() == df.to_dicts()


def test_prompt_ids_spell_the_same_json_as_row_ids():
    texts = ["plain", 'quote " and \\ backslash', "new\nline\ttab", "emoji 🙂 and é", "\x00\x1f control"]
    assert sources.prompt_ids("src-1", texts) == \
        sources.row_ids("src-1", [[{"role": "user", "content": t}] for t in texts])
