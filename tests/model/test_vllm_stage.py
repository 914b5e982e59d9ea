"""`draftline extract` with `extract.backend: vllm`, the stage itself in this process, vLLM
replaced by the stand-in of fake_vllm.py: a `target.materialize: false` pointer, the plan's
longest row, `target.trust_remote_code` from params.yaml, and the shards the transformers
backend writes for the same project; an MLA target refused in one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from conftest import ROOT

import fake_vllm
from draftline.cli import main
from draftline.config.drafter import DrafterParams
from draftline.config.target import TargetParams
from draftline.hidden.reader import load_sequences
from draftline.hidden.vllm_backend import SAMPLED_TOKENS
from draftline.io import write_parquet
from draftline.target.info import describe
from draftline.target.load import POINTER

LAYERS = [0, 2]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """data/target/model as the target stage leaves it with materialize: false (a pointer to
    the tiny Qwen3.6-layout checkpoint), its info.json, 10 tokenized rows, params.yaml."""
    from tiny_layouts import qwen36_target

    root = tmp_path_factory.mktemp("vllm-stage")
    real = qwen36_target(root / "hub/qwen36", num_layers=4)
    (root / "data/target/model").mkdir(parents=True)
    (root / "data/target/model" / POINTER).write_text(json.dumps({"path": str(real), "source": "tiny"}))
    info = describe(root / "data/target/model", TargetParams(materialize=False),
                    DrafterParams(num_layers=2, target_layer_ids=LAYERS), {"source": "tiny"})
    (root / "data/target/info.json").write_text(json.dumps(info))
    g = torch.Generator().manual_seed(1)
    rows = []
    for i in range(10):
        n = int(torch.randint(8, 60, (1,), generator=g))
        rows.append({"id": f"r{i}", "split": "val" if i % 5 == 4 else "train",
                     "input_ids": torch.randint(0, 248000, (n,), generator=g).tolist(),
                     "loss_mask": [0] * (n // 3) + [1] * (n - n // 3)})
    write_parquet(root / "data/tokens/train.parquet", rows)
    return root


def _extract(project: Path, out: str, backend: str, trust: bool = False, info: Path | None = None):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["target"] |= {"materialize": False, "trust_remote_code": trust}
    params["extract"] |= {"backend": backend, "batch_tokens": 256, "shard_bytes": 40_000,
                          "vllm_storage": str(project / out / "vllm-files")}
    file = project / f"{out}.yaml"
    file.write_text(yaml.safe_dump(params))
    args = ["--params", str(file), "--device", "cpu", "extract", "--model", str(project / "data/target/model"),
            "--info", str(info or project / "data/target/info.json"),
            "--tokens", str(project / "data/tokens/train.parquet"), "--out", str(project / out / "hidden"),
            "--metrics", str(project / out / "extract.json")]
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("trust", [False, True])
def test_the_stage_runs_vllm_on_the_resolved_target_and_stores_the_transformers_rows(project, monkeypatch, trust):
    fake_vllm.install(monkeypatch)
    out = f"vllm-{trust}"
    res = _extract(project, out, "vllm", trust)
    assert res.exit_code == 0, res.output
    (kw,) = fake_vllm.LLM.made
    lengths = [len(r) for r in _ids(project)]
    assert kw["model"] == json.loads((project / "data/target/model" / POINTER).read_text())["path"]
    assert kw["max_model_len"] == max(lengths) + SAMPLED_TOKENS
    assert kw["trust_remote_code"] is trust
    assert json.loads((project / out / "extract.json").read_text())["backend"] == "vllm"

    if not (project / "hf/hidden").exists():
        assert _extract(project, "hf", "transformers").exit_code == 0
    got = {s.id: s for s in load_sequences(project / out / "hidden")}
    want = {s.id: s for s in load_sequences(project / "hf/hidden")}
    assert sorted(got) == sorted(want)
    for i, s in got.items():
        assert torch.equal(s.input_ids, want[i].input_ids)
        # both bf16 of a float32 forward, the stage's run batched and padded: a rounding step apart
        torch.testing.assert_close(s.context, want[i].context, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(s.final, want[i].final, rtol=2e-2, atol=2e-2)


def _ids(project: Path) -> list[list[int]]:
    import pyarrow.parquet as pq

    return pq.read_table(project / "data/tokens/train.parquet", columns=["input_ids"]).column(0).to_pylist()


def test_an_mla_target_is_refused_in_one_line_before_any_work(project, monkeypatch, tmp_path):
    fake_vllm.install(monkeypatch)
    info = json.loads((project / "data/target/info.json").read_text())
    info |= {"architecture": "Kimi_K25ForConditionalGeneration", "model_type": "deepseek_v3", "attention": "mla"}
    kimi = tmp_path / "info.json"
    kimi.write_text(json.dumps(info))
    res = _extract(project, "mla", "vllm", info=kimi)
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        "error: extract.backend: vllm: MLA targets (Kimi_K25ForConditionalGeneration) are not proven with vLLM's "
        "hidden-states connector (vLLM 0.33 raises 'MLA verifiers are unsupported'); use extract.backend: "
        "transformers")
    assert fake_vllm.LLM.made == [] and not (project / "mla/hidden").exists()  # nothing planned, cleared or started
