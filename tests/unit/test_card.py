"""The drafter's model card: what a hub page and a serving engine need, from real metrics."""

import json

from click.testing import CliRunner
from conftest import ROOT

from draftline.cli import main
from draftline.decode.card import render

CONFIG = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 3, "hidden_size": 576, "block_size": 4,
          "dflash_config": {"block_size": 4, "mask_token_id": 16, "target_layer_ids": [1, 26]}}
INFO = {"architecture": "LlamaForCausalLM", "num_hidden_layers": 30,
        "provenance": {"source": "embedded", "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct"}}


def _metrics():
    return json.loads((ROOT / "data/metrics/benchmark.json").read_text())


def test_card_has_front_matter_the_tau_table_and_serve_commands():
    metrics = _metrics()
    card = render(CONFIG, INFO, metrics, "me/drafter")
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in front and "library_name: transformers" in front
    assert "- dflash" in front and "- speculative-decoding" in front
    for src, entry in metrics["greedy"].items():
        row = next(line for line in body.splitlines() if line.startswith(f"| `{src}` |"))
        assert f"{entry['dflash']['tau']:.3f} ({entry['dflash']['speedup']:.2f}x)" in row
    # vLLM drafts block_size - 1 tokens after the anchor; SGLang counts the whole block
    assert '"method": "dflash", "model": "me/drafter", "num_speculative_tokens": 3' in body
    assert "--speculative-algorithm DFLASH --speculative-draft-model-path me/drafter" in body
    assert "--speculative-num-draft-tokens 4" in body
    assert "| target_layer_ids | [1, 26]" in body and "| mask_token_id | 16 |" in body
    assert "checked against the serving code of vLLM 0.33.0 and SGLang 0.5.23" in body


def test_a_local_target_has_no_base_model_and_dflash2_says_what_it_needs():
    info = {**INFO, "provenance": {"source": "/models/mine"}}
    card = render({**CONFIG, "architectures": ["DFlash2DraftModel"]}, info, _metrics(), "d")
    assert "base_model" not in card and "vllm serve /models/mine" in card and "DFlash2DraftModel" in card


def test_card_command_writes_the_file(tmp_path):
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter/config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "info.json").write_text(json.dumps(INFO))
    out = tmp_path / "drafter/README.md"
    args = ["card", "--drafter", str(tmp_path / "drafter"), "--info", str(tmp_path / "info.json"),
            "--metrics", str(ROOT / "data/metrics/benchmark.json"), "--out", str(out), "--repo", "org/d"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert '"model": "org/d"' in out.read_text()
    missing = CliRunner().invoke(main, [*args[:2], str(tmp_path / "nowhere"), *args[3:]])
    assert missing.exit_code == 1 and "not found" in missing.output


def test_a_thinking_target_card_splits_tau_at_the_reasoning_end():
    metrics = _metrics()
    assert "reasoning" not in render(CONFIG, INFO, metrics, "d")  # a target that does not think
    thinking = json.loads(json.dumps(metrics))
    thinking["reasoning_end"] = "</think>"
    for entry in thinking["greedy"].values():
        entry["dflash"].update(tau_reasoning=2.5, tau_answer=None, reasoning_tokens=40, answer_tokens=0)
    card = render(CONFIG, INFO, thinking, "d")
    assert "its reasoning ends at `</think>`" in card
    tau = thinking["greedy"]["all"]["dflash"]["tau"]
    assert f"| `all` | {tau:.3f} | 2.500 (40) | - (0) |" in card
