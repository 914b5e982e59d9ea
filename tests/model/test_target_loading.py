"""Real checkpoints load faithfully or not at all: transformers' loading report is read, and
quantized releases load through their own library (tiny targets in the real layouts,
quantized by the real libraries: tests/quantized_layouts.py)."""

import json
import re
import shutil

import pytest
import torch
import yaml
from click.testing import CliRunner
from conftest import ROOT
from quantized_layouts import kimi_int4, qwen_fp8
from safetensors.torch import load_file, save_file
from tiny_layouts import kimi26_target, qwen36_target

from draftline.cli import main
from draftline.target.load import TargetError, load_model

IDS = torch.tensor([[5, 17, 230, 1024, 77, 3, 991, 12, 40, 41, 600, 7]])


@pytest.fixture(scope="session")
def kimi(tmp_path_factory):
    return kimi26_target(tmp_path_factory.mktemp("kimi") / "model")


@pytest.fixture(scope="session")
def qwen(tmp_path_factory):
    return qwen36_target(tmp_path_factory.mktemp("qwen") / "model", num_layers=4)


def _copy(src, tmp_path, name="model"):
    return shutil.copytree(src, tmp_path / name)


def _logits(model):
    with torch.inference_mode():
        return model(IDS).logits


def _with_weights(folder, weights: dict):
    """The unquantized target with `weights` (checkpoint name -> tensor) put in place, the
    experts fused as transformers holds them: the dequantized reference."""
    model = load_model(folder)
    params = dict(model.named_parameters())
    experts = {}
    for key, w in weights.items():
        m = re.search(r"layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$", key)
        if m:
            experts.setdefault(int(m[1]), {})[(int(m[2]), m[3])] = w
            continue
        params[re.sub(r"^model\.language_model\.", "model.", key)].data.copy_(w)
    for layer, ws in experts.items():
        n = 1 + max(e for e, _ in ws)
        mlp = model.model.layers[layer].mlp.experts
        mlp.gate_up_proj.data.copy_(torch.stack([torch.cat([ws[e, "gate"], ws[e, "up"]]) for e in range(n)]))
        mlp.down_proj.data.copy_(torch.stack([ws[e, "down"] for e in range(n)]))
    return model


def test_kimi_int4_experts_load_through_compressed_tensors(kimi, tmp_path):
    """Kimi K2.x's INT4 pack-quantized experts, packed by compressed-tensors itself, load
    dequantized: the logits equal those of the same model holding compressed-tensors'
    own dequantization of each expert, and stay within INT4's error of the BF16 original."""
    quantized = _copy(kimi, tmp_path)
    reference = kimi_int4(quantized)
    assert reference and any(k.endswith("weight_packed") for k in load_file(str(quantized / "model.safetensors")))
    got = _logits(load_model(quantized))
    assert torch.allclose(got, _logits(_with_weights(kimi, reference)), rtol=0, atol=1e-5)
    original = _logits(load_model(kimi))
    assert 0 < (got - original).abs().max() < 0.05 * original.abs().max()  # group-32 INT4, not a random model


def test_fp8_block_quantized_qwen36_loads_dequantized(qwen, tmp_path):
    quantized = _copy(qwen, tmp_path)
    reference = qwen_fp8(quantized)
    got = _logits(load_model(quantized))
    assert torch.allclose(got, _logits(_with_weights(qwen, reference)), rtol=0, atol=1e-5)


def test_packed_experts_without_their_config_fail_naming_them(kimi, tmp_path):
    """The silent failure: the experts renamed to the packed format with no
    quantization_config loaded random before. Now the load fails naming every one."""
    renamed = _copy(kimi, tmp_path)
    kimi_int4(renamed)
    cfg = json.loads((renamed / "config.json").read_text())
    del cfg["quantization_config"]
    (renamed / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TargetError) as e:
        load_model(renamed)
    msg = str(e.value)
    assert "does not load as DeepseekV3ForCausalLM" in msg
    assert "6 missing (they would load random): model.layers.N.mlp.experts.down_proj [N: 1-3] x3" in msg
    for part in ("gate", "up", "down"):
        for name in ("weight_packed", "weight_scale", "weight_shape"):
            assert f"model.layers.N.mlp.experts.N.{part}_proj.{name} [N: 1-3; 0-7] x24" in msg
    assert "no quantization_config" in msg and "\n" not in msg


def test_a_mis_shaped_tensor_fails_naming_it(kimi, tmp_path):
    bad = _copy(kimi, tmp_path)
    tensors = load_file(str(bad / "model.safetensors"))
    key = "language_model.model.layers.1.self_attn.o_proj.weight"
    tensors[key] = tensors[key][:, :32].contiguous()
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(TargetError, match=r"1 mis-shaped: model\.layers\.1\.self_attn\.o_proj\.weight: "
                                          r"\(64, 32\) vs \(64, 64\)"):
        load_model(bad)


def test_an_expert_of_another_shape_fails_naming_the_fused_tensor(kimi, tmp_path):
    bad = _copy(kimi, tmp_path)
    tensors = load_file(str(bad / "model.safetensors"))
    key = "language_model.model.layers.2.mlp.experts.3.up_proj.weight"
    tensors[key] = tensors[key][:16].contiguous()
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(TargetError, match=r"does not load as DeepseekV3ForCausalLM: 1 not convertible \(fused or dequantized from tensors of unequal "
                                          r"shapes\): "
                                          r"model\.layers\.2\.mlp\.experts\.gate_up_proj"):
        load_model(bad)


def _target_stage(tmp_path, source):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["target"]["source"] = str(source)
    params["drafter"]["target_layer_ids"] = [0, 1]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    info = tmp_path / "out/info.json"
    res = CliRunner().invoke(main, ["--params", str(tmp_path / "params.yaml"), "target", "--model",
                                    str(tmp_path / "out/model"), "--info", str(info)])
    return res, info


def test_the_target_stage_checks_loading_and_records_the_format(kimi, tmp_path):
    """The stage checks every tensor (on the meta device: no weight is read), counts the
    vision tower it skips by design, and records the quantization format in info.json."""
    quantized = _copy(kimi, tmp_path, "src")
    kimi_int4(quantized)
    res, info_file = _target_stage(tmp_path, quantized)
    assert res.exit_code == 0, res.output
    info = json.loads(info_file.read_text())
    vision = [k for k in load_file(str(quantized / "model.safetensors")) if "vision" in k or "mm_projector" in k]
    assert info["loading"] == {"model_class": "DeepseekV3ForCausalLM", "other_tower_tensors_skipped": len(vision)}
    assert info["quantization"]["method"] == "compressed-tensors"
    assert info["quantization"]["format"] == "pack-quantized"
    assert info["quantization"]["groups"]["group_0"] | {} == {
        "targets": ["Linear"], "type": "int", "num_bits": 4, "strategy": "group", "group_size": 32,
        "symmetric": True, "format": None}
    assert f"{len(vision)} tensors of the vision tower, its projector and MTP layers are skipped by design" in res.output


def test_the_target_stage_refuses_a_random_target_before_any_later_stage(kimi, tmp_path):
    renamed = _copy(kimi, tmp_path, "src")
    kimi_int4(renamed)
    cfg = json.loads((renamed / "config.json").read_text())
    del cfg["quantization_config"]
    (renamed / "config.json").write_text(json.dumps(cfg))
    res, info_file = _target_stage(tmp_path, renamed)
    assert res.exit_code != 0 and "6 missing (they would load random)" in res.output
    assert not info_file.exists() and not (tmp_path / "out/model").exists()


def test_an_unsupported_quantization_is_refused_with_what_to_do(kimi, tmp_path):
    gptq = _copy(kimi, tmp_path, "src")
    cfg = json.loads((gptq / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (gptq / "config.json").write_text(json.dumps(cfg))
    res, _ = _target_stage(tmp_path, gptq)
    assert res.exit_code != 0
    assert "quantization_config.quant_method 'gptq' is not loadable here" in res.output
    assert "use the model's BF16 release" in res.output
