"""The real targets' layouts through every stage with real `dvc repro`: a tiny Qwen3.6-class
checkpoint (multimodal wrapper, Gated-DeltaNet + gated full attention, the real Qwen3.6
vocabulary) and a tiny Kimi-K2.6-class one (kimi_k25 wrapper, MLA + MoE), smoke params
otherwise, `train.init: target`. The benchmark stage fails when any greedy method's output
differs from plain greedy decoding, so a pass means the chain, the tree and prompt lookup
are lossless on both."""

import json
import os
import shutil

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import ROOT
from pipeline_helpers import copy_code, run_command
from quantized_layouts import kimi_int4
from tiny_layouts import QWEN36_EOS, QWEN36_VOCAB, kimi26_target, qwen36_target

from draftline.presets import merged

pytestmark = pytest.mark.slow

LAYOUTS = {
    # a spare embedding row past the tokenizer's last id (248,077 tokens in 248,320 rows)
    "qwen3.6": (qwen36_target, {"mask_token": QWEN36_VOCAB - 1, "num_layers": 2,
                                "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8}),
    # as Moonshot ships it: the routed experts INT4 (compressed-tensors pack-quantized)
    "kimi-k2.6": (lambda folder: kimi_int4(kimi26_target(folder)), {"mask_token": "[UNK]", "num_layers": 2, "intermediate_size": 32,
                                  "target_layer_ids": [0, 1]}),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_real_layout_runs_every_stage(tmp_path, monkeypatch, layout):
    build, drafter = LAYOUTS[layout]
    repo = tmp_path
    pythonpath = copy_code(ROOT, repo)
    shutil.copytree(ROOT / "data/seed", repo / "data/seed")
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    shutil.copy(ROOT / "data" / ".gitignore", repo / "data" / ".gitignore")
    build(repo / "targets" / layout)
    params = merged(ROOT / "presets" / "smoke.yaml", ROOT / "params.yaml")
    params["target"]["source"] = f"targets/{layout}"
    params["drafter"] |= drafter
    params["train"]["init"] = "target"
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (repo / ".gitignore").write_text("/targets\n")
    run_command("git init -q && dvc init -q && git add -A && git commit -qm init", repo)
    monkeypatch.setenv("PYTHONPATH", pythonpath)
    out = run_command("dvc repro", repo).stdout

    info = json.loads((repo / "data/target/info.json").read_text())
    config = json.loads((repo / "data/drafter/config.json").read_text())
    bench = json.loads((repo / "data/metrics/benchmark.json").read_text())
    rows = pq.read_table(repo / "data/bench/results.parquet").to_pylist()
    assert bench["mismatches"] == 0 and all(r["equal_to_target"] for r in rows if "equal_to_target" in r)
    assert {r["method"] for r in rows} >= {"dflash", "untrained", "prompt_lookup", "tree_4"}
    assert "train: init drafter layer 0 <- target layer" in out
    if layout == "qwen3.6":
        assert info["layer_types"][:4] == ["linear_attention"] * 3 + ["full_attention"]
        assert info["eos_token_ids"] == sorted(QWEN36_EOS) and info["vocab_size"] == QWEN36_VOCAB
        assert config["dflash_config"]["mask_token_id"] == QWEN36_VOCAB - 1
        assert config["layer_types"] == ["sliding_attention", "full_attention"] and config["sliding_window"] == 8
        assert "partial_rotary_factor" not in config["rope_parameters"]
    else:
        assert info["attention"] == "mla" and info["mlp_types"] == ["dense", "moe", "moe", "moe"]
        assert info["quantization"]["format"] == "pack-quantized"
        assert config["head_dim"] == 16 and config["intermediate_size"] == 32  # v_head_dim, not qk_rope_head_dim
    assert not os.path.exists(repo / "data/target/model/model.safetensors.tmp")
