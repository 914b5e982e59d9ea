"""The exported drafter's config.json for the three target layouts (Llama, Qwen3.6-class
hybrid, Kimi-class MLA + MoE) carries every key vLLM's, SGLang's and z-lab's DFlash loaders
read, describes what the drafter runs, and loads in z-lab's DFlashDraftModel; and target
layer id i means the output of decoder layer i (hidden_states[i + 1]), the convention of
z-lab, vLLM (+1) and SGLang (+1)."""

import json

import pytest
import torch

from draftline.config.drafter import DrafterParams
from draftline.drafter.model import build_drafter, drafter_config, save_drafter
from draftline.drafter.serving import SGLANG_KEYS, VLLM_KEYS, ZLAB_KEYS, missing
from extract_helpers import context_features


def _llama():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def _qwen36():
    from transformers.models.qwen3_5 import Qwen3_5Config

    text = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=2,
                linear_key_head_dim=8, linear_value_head_dim=8,
                layer_types=["linear_attention"] * 3 + ["full_attention"])
    return Qwen3_5Config(text_config=text, vision_config=dict(depth=1, hidden_size=16, intermediate_size=32,
                                                              num_heads=2, out_hidden_size=32))


def _kimi():
    from transformers.models.kimi_k25 import Kimi_K25Config

    text = dict(model_type="deepseek_v3", vocab_size=64, hidden_size=32, intermediate_size=96,
                moe_intermediate_size=16, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
                n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                q_lora_rank=16, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8, n_group=1,
                topk_group=1, rope_parameters={"rope_type": "yarn", "rope_theta": 50000.0, "factor": 4.0,
                                               "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                               "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0})
    return Kimi_K25Config(text_config=text, vision_config=dict(num_hidden_layers=1, hidden_size=16,
                                                               intermediate_size=32, num_attention_heads=2))


LAYOUTS = {"llama": (_llama, {}),
           "qwen3.6": (_qwen36, {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 16,
                                 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}),
           "kimi": (_kimi, {})}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_export_carries_every_loader_key_and_loads_in_zlab(tmp_path, layout):
    from dflash.model import DFlashDraftModel

    from transformers import AutoConfig

    make, shape = LAYOUTS[layout]
    dp = DrafterParams(num_layers=2, block_size=8, target_layer_ids=[0, 2], mask_token=63, **shape)
    built = build_drafter(drafter_config(make(), dp, [0, 2], 63), 0)
    save_drafter(built, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert missing(cfg, VLLM_KEYS) == [] and missing(cfg, SGLANG_KEYS) == [] and missing(cfg, ZLAB_KEYS) == []
    # vLLM's convention (id + 1) for releases that read only this key; tests/engines checks
    # it against vLLM's own code
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 3]
    # top-level rope_theta for transformers 4.57 (z-lab's pin); transformers 5 reads the same rotary
    assert cfg["rope_theta"] == cfg["rope_parameters"]["rope_theta"]
    assert AutoConfig.from_pretrained(tmp_path).rope_parameters == built.config.rope_parameters
    dc = cfg["dflash_config"]
    assert (dc["block_size"], dc["mask_token_id"], dc["target_layer_ids"], dc["num_target_layers"]) == (8, 63, [0, 2], 4)
    assert dc["mask_token_id"] < cfg["vocab_size"] and cfg["target_hidden_size"] == cfg["hidden_size"] == 32
    # rotary keys that describe the drafter: it rotates its whole head over 1-D positions
    assert not {"partial_rotary_factor", "mrope_section", "mrope_interleaved"} & set(cfg["rope_parameters"])
    model = DFlashDraftModel.from_pretrained(str(tmp_path))
    assert model.target_layer_ids == [0, 2] and model.mask_token_id == 63 and model.block_size == 8
    if layout == "qwen3.6":
        assert cfg["layer_types"] == ["sliding_attention", "full_attention"] and cfg["sliding_window"] == 16
        assert (dc["use_swa"], dc["swa_window_size"], dc["causal"]) == (True, 16, None)
        assert [layer.self_attn.sliding_window for layer in model.layers] == [16, None]
        assert [layer.self_attn.is_causal for layer in model.layers] == [True, False]
    else:
        assert cfg["layer_types"] == ["full_attention"] * 2 and cfg["sliding_window"] is None
        assert (dc["use_swa"], dc["causal"]) == (False, False)
    if layout == "kimi":  # MLA: v_head_dim and 8 key/value heads at most, not the 4-wide rope part
        assert (cfg["head_dim"], cfg["num_key_value_heads"], cfg["intermediate_size"]) == (8, 4, 96)
        assert cfg["rope_parameters"]["rope_type"] == "yarn" and cfg["rope_parameters"]["factor"] == 4.0


def test_a_mask_id_outside_the_embedding_is_refused():
    from draftline.drafter.model import DrafterError, mask_token_id

    assert mask_token_id(None, 63, 64) == 63  # a spare row needs no tokenizer entry
    with pytest.raises(DrafterError, match="id 64 is outside the target's embedding"):
        mask_token_id(None, 64, 64)


@pytest.mark.parametrize("layout", ["qwen3.6", "kimi"])
def test_layer_id_i_is_the_output_of_decoder_layer_i(layout):
    """What extract stores and the benchmark feeds for layer id i is decoder layer i's output,
    read by a hook on that layer: hidden_states[i + 1], as z-lab, vLLM and SGLang index."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    make, _ = LAYOUTS[layout]
    model = AutoModelForCausalLM.from_config(make().get_text_config(decoder=True)).eval()
    seen = {}
    for i, layer in enumerate(model.model.layers):
        layer.register_forward_hook(lambda m, a, out, i=i: seen.setdefault(i, out[0] if isinstance(out, tuple) else out))
    with torch.no_grad():
        out = model(torch.randint(0, 64, (1, 7)), output_hidden_states=True)
    for i in (0, 2):
        torch.testing.assert_close(context_features(out.hidden_states, [i]), seen[i])
