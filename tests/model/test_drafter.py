"""A drafter trained by us loads and runs in z-lab's reference code, with the same tau."""

import json
import time

import dflash.model as zlab
import pytest
from conftest import train_params
from extract_helpers import extract_in_process

from draftline.config.drafter import DrafterParams

from draftline.config.regenerate import RegenerateParams
from draftline.decode.acceptance import tau
from draftline.decode.chain import greedy, speculative
from draftline.drafter.loop import train
from draftline.drafter.model import build_drafter, drafter_config, load_drafter, mask_token_id
from draftline.hidden.reader import load_sequences
from draftline.regenerate.drive import converse
from draftline.regenerate.hf_backend import HFBackend
from draftline.sequences.loss_mask import encode

PROMPTS = ["Write a Python function that adds two numbers.", "What is the capital of France?",
           "List three colors.", "Explain what a variable is in one sentence.",
           "Write a haiku about rain.", "What is 12 times 12?"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, target_model, tokenizer):
    """A drafter trained briefly on the target's own answers to PROMPTS."""
    dp = DrafterParams(num_layers=1, block_size=4, target_layer_ids=None)
    backend = HFBackend(target_model, tokenizer, RegenerateParams(max_new_tokens=40), [tokenizer.eos_token_id])
    convs = converse(backend, [[{"role": "user", "content": p}] for p in PROMPTS], [0] * len(PROMPTS))
    rows = []
    for i, (conv, answers) in enumerate(convs):
        e = encode(tokenizer, conv, [a.finish_reason for a in answers], 256)
        rows.append({"id": f"r{i}", "split": "train", "input_ids": e.input_ids, "loss_mask": e.loss_mask})
    layers = [15]
    hid = tmp_path_factory.mktemp("hidden")
    extract_in_process(target_model, rows, layers, hid, 4096, tokenizer.eos_token_id)
    seqs = load_sequences(hid)
    mask_id = mask_token_id(tokenizer, dp.mask_token, target_model.config.vocab_size)
    cfg = drafter_config(target_model.config, dp, layers, mask_id)
    drafter = build_drafter(cfg, 0)
    tp = train_params(num_anchors=32, batch_size=6, epochs=60, lr=3e-3, eval_every=1000)
    log = train(drafter, target_model.get_input_embeddings().weight, target_model.get_output_embeddings().weight,
                seqs, [], dp, tp, mask_id)
    out = tmp_path_factory.mktemp("drafter")
    drafter.save_pretrained(str(out))
    return out, log


def test_checkpoint_is_a_zlab_drafter(trained):
    path, log = trained
    assert log.steps[-1]["loss"] < log.steps[0]["loss"] * 0.7  # it learned something
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"]
    assert cfg["model_type"] == "qwen3" and cfg["tie_word_embeddings"] is False
    assert cfg["num_target_layers"] == 30 and cfg["block_size"] == 4
    assert cfg["dflash_config"] == {"block_size": 4, "mask_token_id": 16, "target_layer_ids": [15],
                                    "num_target_layers": 30, "use_swa": False, "swa_window_size": None,
                                    "causal": False}
    # What vLLM's and SGLang's DFlash loaders read besides dflash_config.
    assert cfg["layer_types"] == ["full_attention"] and cfg["num_hidden_layers"] == 1
    assert cfg["hidden_size"] == 576 and cfg["vocab_size"] == 49152
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert {"fc.weight", "hidden_norm.weight", "norm.weight"} <= keys
    assert all(k.startswith(("layers.", "fc.", "hidden_norm.", "norm.")) for k in keys)
    model = zlab.DFlashDraftModel.from_pretrained(str(path))
    assert model.block_size == 4 and model.mask_token_id == 16 and model.target_layer_ids == [15]


def test_tau_equals_zlab_dflash_generate(trained, target_model, tokenizer, monkeypatch):
    path, _ = trained
    monkeypatch.setattr(zlab, "_cuda_time", time.perf_counter)  # return_stats syncs CUDA
    drafter = load_drafter(path)
    ours, theirs = [], []
    for p in PROMPTS + ["Name two planets."]:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                            return_dict=True, return_tensors="pt")["input_ids"]
        plain = greedy(target_model, ids, 48, [tokenizer.eos_token_id])
        spec = speculative(drafter, target_model, ids, 48, [tokenizer.eos_token_id])
        ref = zlab.dflash_generate(drafter, target_model, ids, 48, [tokenizer.eos_token_id], return_stats=True)
        assert spec.tokens == plain.tokens  # lossless
        assert ref.output_ids[0, ids.shape[1]:].tolist() == plain.tokens
        ours.append(spec.acceptance_lengths)
        theirs.append(ref.acceptance_lengths)
    assert abs(tau(ours) - tau(theirs)) < 0.01
    assert tau(ours) > 1.2  # the trained drafter does get tokens accepted on what it saw


def test_untrained_drafter_is_near_one(trained, target_model, tokenizer):
    path, _ = trained
    d = build_drafter(load_drafter(path).config, 1).eval()
    ids = tokenizer.apply_chat_template([{"role": "user", "content": PROMPTS[0]}], add_generation_prompt=True,
                                        return_dict=True, return_tensors="pt")["input_ids"]
    spec = speculative(d, target_model, ids, 32, [tokenizer.eos_token_id])
    assert spec.tokens == greedy(target_model, ids, 32, [tokenizer.eos_token_id]).tokens
    assert tau([spec.acceptance_lengths]) < 1.2
