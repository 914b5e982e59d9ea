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
    """`--target-device-map auto` hands placement to transformers/accelerate. With one
    device (this CPU-only machine) transformers places every weight there without
    accelerate's hooks; the target must compute exactly as before. The multi-device split
    is checked on a GPU (tests/gpu)."""
    import torch

    from draftline.target.load import load_model

    mapped = load_model(target_dir, "float32", "cpu", device_map="auto")
    assert {p.device.type for p in mapped.parameters()} == {"cpu"}
    assert not any(p.requires_grad for p in mapped.parameters())
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        assert torch.equal(mapped(ids).logits, target_model(ids).logits)


def test_bad_layer_ids_stop_the_target_stage_before_it_writes(tmp_path):
    """drafter.target_layer_ids out of range fails on the config alone: no model folder,
    no info file, nothing half-written."""
    import yaml
    from click.testing import CliRunner
    from conftest import ROOT

    from draftline.cli import main

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["drafter"]["target_layer_ids"] = [1, 99]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    model, info = tmp_path / "data/target/model", tmp_path / "data/target/info.json"
    res = CliRunner().invoke(main, ["--params", str(tmp_path / "params.yaml"), "target", "--model", str(model),
                                    "--info", str(info)])
    assert res.exit_code == 2
    assert "drafter.target_layer_ids: layer 99 out of range for a 30-layer target" in res.output
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").rglob("*"))
