"""`train.init: target`: the drafter starts as the target's own next layer."""

import pytest
import torch

from draftline.config.drafter import DrafterParams
from draftline.drafter.init_target import init_from_target, target_init_layers
from draftline.drafter.model import build_drafter, drafter_config
from draftline.target.info import TargetInfo
from draftline.target.layout import describe_layers
from draftline.target.load import TargetError
from draftline.target.weights import Tensors, read_layer


def test_init_layers_follow_the_deepest_captured_layer():
    assert target_init_layers(30, [1, 27], 2) == [28, 29]
    assert target_init_layers(30, [1, 15], 2) == [16, 17]
    # never a captured layer or one before it: past the last layer, fresh
    assert target_init_layers(30, [1, 29], 2) == [None, None]
    assert target_init_layers(64, [1, 16, 31, 46, 61], 5) == [62, 63, None, None, None]
    assert target_init_layers(4, [0], 1) == [1]


def _info(config, layer_ids) -> TargetInfo:
    text = config.get_text_config(decoder=True)
    return TargetInfo(architecture="x", model_type=text.model_type, num_hidden_layers=text.num_hidden_layers,
                      hidden_size=text.hidden_size, vocab_size=text.vocab_size, target_layer_ids=layer_ids,
                      eos_token_ids=[0], dtype="float32", **describe_layers(text))


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
    assert target_init_layers(3, captured, 1) == [2]
    cfg = drafter_config(model.config, DrafterParams(num_layers=1, block_size=4), captured, 39)
    drafter = build_drafter(cfg, 0).eval()
    lines = init_from_target(drafter, path, _info(model.config, captured))
    assert lines == ["drafter layer 0 <- target layer 2: norms, attention, mlp"]
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
        read_layer(Tensors(path), 7)


def test_a_narrower_drafter_mlp_starts_fresh(qwen3_target):
    model, path = qwen3_target
    dp = DrafterParams(num_layers=1, block_size=4, intermediate_size=48)
    drafter = build_drafter(drafter_config(model.config, dp, [1], 39), 0)
    before = drafter.layers[0].mlp.up_proj.weight.clone()
    lines = init_from_target(drafter, path, _info(model.config, [1]))
    assert lines == ["drafter layer 0 <- target layer 2: norms, attention, fresh mlp (dense layer, no MLP of width 48)"]
    assert torch.equal(drafter.layers[0].mlp.up_proj.weight, before)


def test_quantized_layers_are_refused(tmp_path):
    from safetensors.torch import save_file

    save_file({"model.layers.1.input_layernorm.weight": torch.ones(4),
               "model.layers.1.mlp.up_proj.weight": torch.zeros(4, 4),
               "model.layers.1.mlp.up_proj.weight_scale_inv": torch.ones(1), "model.norm.weight": torch.ones(4)},
              str(tmp_path / "model.safetensors"))
    with pytest.raises(TargetError, match="layer 1 is quantized .*weight_scale_inv"):
        read_layer(Tensors(tmp_path), 1)


def test_hybrid_target_gives_gated_query_half_and_offset_norms(tmp_path):
    """Qwen3.6-class: after a captured linear-attention layer comes another; its attention
    comes from the nearest full-attention layer (its query half), norms as 1 + w."""
    from transformers.models.qwen3_5 import Qwen3_5TextConfig, Qwen3_5ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3_5TextConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_key_heads=2,
                            linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
                            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"])
    model = Qwen3_5ForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(-0.5, 0.5)
    model.save_pretrained(tmp_path)
    drafter = build_drafter(drafter_config(cfg, DrafterParams(num_layers=1, block_size=4), [1], 39), 0)
    lines = init_from_target(drafter, tmp_path, _info(cfg, [1]))
    assert lines == ["drafter layer 0 <- target layer 2: norms, attention of layer 3 (layer 2 is linear_attention), mlp"]
    full, own = model.model.layers[3].self_attn, drafter.layers[0].self_attn
    q = full.q_proj.weight.view(4, 2, 8, 32)[:, 0].reshape(32, 32)  # per head: query rows, then gate rows
    assert torch.equal(own.q_proj.weight, q) and torch.equal(own.k_proj.weight, full.k_proj.weight)
    assert torch.equal(own.q_norm.weight, full.q_norm.weight + 1)
    layer = model.model.layers[2]
    assert torch.equal(drafter.layers[0].input_layernorm.weight, layer.input_layernorm.weight + 1)
    assert torch.equal(drafter.layers[0].mlp.down_proj.weight, layer.mlp.down_proj.weight)
    assert torch.equal(drafter.norm.weight, model.model.norm.weight + 1)
    # the (1 + w) norm and the plain one agree: the copy computes what the target's did
    x = torch.randn(3, 32)
    torch.testing.assert_close(drafter.layers[0].input_layernorm(x), layer.input_layernorm(x))


def test_mla_moe_target_keeps_norms_and_shared_expert(tmp_path):
    """Kimi-class: MLA has no q/k/v to copy anywhere (fresh attention); an MoE layer gives its
    shared expert where it has the drafter's width."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(0)
    cfg = DeepseekV3Config(vocab_size=40, hidden_size=32, intermediate_size=64, moe_intermediate_size=32,
                           num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                           n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=16,
                           kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8, n_group=1,
                           topk_group=1)
    DeepseekV3ForCausalLM(cfg).save_pretrained(tmp_path)
    dp = DrafterParams(num_layers=2, block_size=4, intermediate_size=32)
    drafter = build_drafter(drafter_config(cfg, dp, [0], 39), 0)
    assert (drafter.config.head_dim, drafter.config.num_key_value_heads) == (8, 4)  # v_head_dim, not the rope part
    lines = init_from_target(drafter, tmp_path, _info(cfg, [0]))
    assert lines == [
        "drafter layer 0 <- target layer 1: norms, fresh attention (no full-attention layer of the drafter's "
        "shape: mla, full_attention), shared expert",
        "drafter layer 1 <- target layer 2: norms, fresh attention (no full-attention layer of the drafter's "
        "shape: mla, full_attention), shared expert"]
