"""The materialised target folder: its bytes depend on the weights and tokenizer only."""

import json


def test_materialized_folder_carries_no_load_options(target_dir, tokenizer):
    # transformers records how the tokenizer was loaded (local_files_only follows
    # HF_HUB_OFFLINE); left in, the folder hash and every regeneration key would change
    # with the environment of the run.
    cfg = json.loads((target_dir / "tokenizer_config.json").read_text())
    assert not {"local_files_only", "is_local"} & set(cfg)
    assert cfg["eos_token"] == "<|im_end|>" == tokenizer.eos_token


def test_a_device_map_loads_the_same_target(target_dir, target_model, tokenizer):
    """`--target-device-map auto` (accelerate) places the layers itself; on a CPU-only
    machine it places them all on the CPU, and the target computes exactly as before."""
    import torch

    from draftline.target.load import load_model

    mapped = load_model(target_dir, "float32", "cpu", device_map="auto")
    assert getattr(mapped, "hf_device_map", None), "accelerate did not place the model"
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        assert torch.equal(mapped(ids).logits, target_model(ids).logits)
