"""`train.init: target`: the drafter starts as the target's own next layer."""

import pytest
import torch

from draftline.config import DrafterParams
from draftline.drafter.model import build_drafter, drafter_config, init_from_target, target_init_layers
from draftline.target.load import TargetError
from draftline.target.weights import load_layer_weights


def test_init_layers_follow_the_deepest_captured_layer():
    assert target_init_layers(30, [1, 27], 2) == [28, 29]
    assert target_init_layers(30, [1, 15], 2) == [16, 17]
    assert target_init_layers(30, [1, 29], 2) == [28, 29]  # nothing after layer 29: the last two
    assert target_init_layers(4, [0], 1) == [1]


@pytest.fixture(scope="module")
def qwen3_target(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                      tie_word_embeddings=False)
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from their all-ones start, so a mix-up would show
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    out = tmp_path_factory.mktemp("qwen3") / "model"
    model.save_pretrained(str(out), safe_serialization=True)
    return model, out


def test_initialised_drafter_is_the_targets_last_layer(qwen3_target):
    """Fed the deepest captured state as context and as the query token, a one-layer drafter
    initialised from the target reproduces the target's next layer, final norm and logits."""
    model, path = qwen3_target
    captured = [0, 1]
    layers = target_init_layers(3, captured, 1)
    assert layers == [2]
    cfg = drafter_config(model.config, DrafterParams(num_layers=1, block_size=4), captured, 39)
    drafter = build_drafter(cfg, 0).eval()
    init_from_target(drafter, *load_layer_weights(path, layers))
    ids = torch.randint(0, 40, (1, 12))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        hs = out.hidden_states  # [embeddings, layer 0, layer 1, layer 2 (after the final norm)]
        t = 9
        ctx = torch.cat([hs[1][:, :t], hs[2][:, :t]], dim=-1)
        got = drafter(position_ids=torch.arange(t + 1)[None], noise_embedding=hs[2][:, t:t + 1], target_hidden=ctx)
        logits = model.lm_head(got[:, -1])
    torch.testing.assert_close(got[:, -1], hs[3][:, t], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits, out.logits[:, t], rtol=1e-4, atol=1e-4)
    # The shallower captured layer starts unused; training opens it.
    assert drafter.fc.weight[:, :32].abs().sum() == 0


def test_missing_layer_is_named(qwen3_target):
    _, path = qwen3_target
    with pytest.raises(TargetError, match="no decoder layer 7"):
        load_layer_weights(path, [7])


def test_shape_mismatch_is_named(qwen3_target):
    model, path = qwen3_target
    cfg = drafter_config(model.config, DrafterParams(num_layers=1, block_size=4), [1], 39)
    cfg.intermediate_size = 48
    drafter = build_drafter(cfg, 0)
    with pytest.raises(ValueError, match="mlp.gate_proj.weight is"):
        init_from_target(drafter, *load_layer_weights(path, [2]))


def test_moe_and_quantized_layers_are_refused(tmp_path):
    from safetensors.torch import save_file

    dense = {f"model.layers.1.{n}": torch.zeros(4, 4) for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                                  "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                                  "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                                  "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")}
    moe = {k.replace("layers.1.", "layers.0.").replace("mlp.", "mlp.experts.0."): v.clone() for k, v in dense.items()}
    save_file({**dense, **moe, "model.layers.1.mlp.up_proj.weight_scale_inv": torch.ones(1),
               "model.norm.weight": torch.ones(4)},
              str(tmp_path / "model.safetensors"))
    with pytest.raises(TargetError, match="layer 0 has no 'model.layers.0.mlp.gate_proj.weight'"):
        load_layer_weights(tmp_path, [0])
    with pytest.raises(TargetError, match="layer 1 is quantized .*weight_scale_inv"):
        load_layer_weights(tmp_path, [1])
