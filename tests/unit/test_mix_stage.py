"""The mix stage end to end: byte-identical outputs for the same inputs and params, and
a report that says what each step removed, per source and per category."""

import json

import pyarrow.parquet as pq
import yaml
from conftest import ROOT
from prompt_helpers import load_source

from draftline.config.download import SourceParams

from draftline.config.params import parse_params
from draftline.io import write_parquet
from draftline.prompts import mix as stage


def _raw_rows():
    rows, _ = load_source(SourceParams(name="seed", kind="local", path=str(ROOT / "data/seed/prompts.jsonl")))
    # as in params.yaml: HumanEval's first 8 prompts held out, the rest training prompts
    he, _ = load_source(SourceParams(name="humaneval", kind="humaneval", role="split", holdout=8,
                                     category="humaneval"))
    # a planted near-duplicate, and a training prompt that copies a benchmark prompt
    first = rows[0]["messages"][0]["content"]
    rows.append({**rows[0], "id": "seed-near", "messages": [{"role": "user", "content": first.upper() + " please"}]})
    held = next(r for r in he if r["role"] == "eval")
    rows.append({**rows[0], "id": "seed-leak", "category": "coding", "messages": held["messages"]})
    return rows + he


OUTS = ["train.parquet", "eval.parquet", "mix.json", "mix.tsv"]


def _run_mix(tmp, params):
    write_parquet(tmp / "prompts.parquet", _raw_rows())
    stage.run(params, tmp / "prompts.parquet", *(tmp / p for p in OUTS))
    return {p: (tmp / p).read_bytes() for p in OUTS}


def test_mix_is_byte_identical_and_reports(tmp_path):
    params = parse_params(yaml.safe_load((ROOT / "params.yaml").read_text()))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _run_mix(tmp_path / "a", params)
    b = _run_mix(tmp_path / "b", params)
    m, mb = json.loads(a.pop("mix.json")), json.loads(b.pop("mix.json"))
    assert a == b  # the prompts and the plot, byte for byte
    # the report too, but for what the run cost: its time, rate and memory
    cost = m.pop("cost")
    mb.pop("cost")
    assert m == mb
    assert cost["rows_per_second"] > 0 and cost["peak_rss_mb"] > 0
    # the planted ones (HumanEval's own training prompts lose a few too)
    assert m["near_duplicates_by_source"]["seed"] == 1
    assert m["contaminated_by_source"]["seed"] == 1
    assert m["eval_prompts"] == 8 and m["by_source_after"]["humaneval"] > 100
    train_ids = set(pq.read_table(tmp_path / "a/train.parquet").column("id").to_pylist())
    assert not train_ids & set(pq.read_table(tmp_path / "a/eval.parquet").column("id").to_pylist())
    assert sum(m["by_source_before"].values()) == m["train_before"]
    assert set(m["by_category_after"]) >= {"coding", "math", "chat"}
    # the plot: a column per series, before and after (dvc.yaml draws them side by side)
    plot = [line.split("\t") for line in a["mix.tsv"].decode().splitlines()]
    assert plot[0] == ["category", "before", "after"]
    assert {c: (int(b), int(f)) for c, b, f in plot[1:]} == \
        {c: (m["by_category_before"][c], m["by_category_after"][c]) for c in m["by_category_after"]}
