"""What the serving engines' DFlash loaders read of a drafter's config.json: the one list.

Read from their code (vLLM: model_executor/models/qwen3_dflash.py and the spec-decode
config; SGLang: speculative/dflash_utils.py `parse_dflash_draft_config` and
models/dflash.py), so the export writes every key each of them reads, and a test checks
all three target layouts against these lists. Dotted names are keys inside
`dflash_config`.

Conventions the loaders share with z-lab's `extract_context_feature`: target layer id i
means the *output* of decoder layer i, i.e. transformers' `hidden_states[i + 1]` (vLLM adds
1 to `dflash_config.target_layer_ids` unless a top-level `eagle_aux_hidden_state_layer_ids`
is given, which it takes as-is; SGLang captures "before layer i + 1"). Sliding layers are
causal within the block, full layers not (`dflash_config.causal` / `is_causal` override it).

tests/engines/test_engine_contracts.py feeds an export to the engines' own code (the
versions in card/serving.py `ENGINES_CHECKED`) and compares with what the drafter trained on.
"""

from __future__ import annotations

VLLM_KEYS = (
    "architectures", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "hidden_act", "num_hidden_layers", "vocab_size", "max_position_embeddings",
    "rms_norm_eps", "rope_parameters", "attention_bias", "target_hidden_size", "layer_types", "sliding_window",
    "eagle_aux_hidden_state_layer_ids", "dflash_config.mask_token_id", "dflash_config.target_layer_ids",
    "dflash_config.use_swa", "dflash_config.swa_window_size", "dflash_config.causal",
)

SGLANG_KEYS = (
    "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "rms_norm_eps", "rope_parameters", "layer_types",
    "sliding_window", "num_target_layers", "dflash_config.block_size", "dflash_config.mask_token_id",
    "dflash_config.target_layer_ids", "dflash_config.num_target_layers",
)

# z-lab's DFlashDraftModel: top-level block_size and num_target_layers, the rest from
# dflash_config (its MLX port reads the same). Its repo pins transformers 4.57, whose
# Qwen3Config reads the rotary base only from a top-level rope_theta (else 1e6).
ZLAB_KEYS = ("block_size", "num_target_layers", "layer_types", "sliding_window", "rope_theta",
             "dflash_config.mask_token_id", "dflash_config.target_layer_ids")


# Keys whose null is a setting (no window: no layer slides; causal: decide per layer).
NULLABLE = ("sliding_window", "dflash_config.swa_window_size", "dflash_config.causal")


def missing(config: dict, keys: tuple[str, ...]) -> list[str]:
    """The keys of `keys` that a config.json dict lacks or holds as null where null is not a
    setting."""
    out = []
    for key in keys:
        node, present = config, True
        for part in key.split("."):
            present = isinstance(node, dict) and part in node
            node = node.get(part) if present else None
            if not present:
                break
        if not present or (node is None and key not in NULLABLE):
            out.append(key)
    return out


def serving_fields(layer_types: list[str], sliding_window: int, block_size: int, mask_id: int,
                   layer_ids: list[int], num_target_layers: int, target_hidden_size: int) -> dict:
    """The config keys beyond a Qwen3 config's that the three loaders read."""
    sliding = [t == "sliding_attention" for t in layer_types]
    return {
        "layer_types": list(layer_types),
        "sliding_window": sliding_window if any(sliding) else None,
        "use_sliding_window": any(sliding),
        "target_hidden_size": target_hidden_size,
        "num_target_layers": num_target_layers,
        "block_size": block_size,
        # vLLM's convention (id i + 1 = the state after decoder layer i), which vLLM 0.33
        # derives itself when the key is absent: written so that releases reading only this
        # key capture the same layers.
        "eagle_aux_hidden_state_layer_ids": [i + 1 for i in layer_ids],
        "dflash_config": {
            "block_size": block_size, "mask_token_id": mask_id, "target_layer_ids": list(layer_ids),
            "num_target_layers": num_target_layers,
            # vLLM: every layer slides when use_swa is set and layer_types names none; here
            # layer_types always says, so use_swa only records that some layer does.
            "use_swa": any(sliding), "swa_window_size": sliding_window if any(sliding) else None,
            # z-lab's attention is non-causal in full layers and causal in sliding ones: false
            # says so for a drafter of full layers; with sliding layers null tells vLLM and
            # SGLang to decide per layer the same way (a true/false would override it).
            "causal": None if any(sliding) else False,
        },
    }
