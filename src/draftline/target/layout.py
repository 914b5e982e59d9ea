"""What kind of decoder the target is, read from its config alone.

The real targets ship as multimodal checkpoints: Qwen3.6 (`qwen3_5`) nests its text model's
config under `text_config` beside a vision tower, and mixes Gated-DeltaNet linear-attention
layers with gated full-attention ones; Kimi K2.6 (`kimi_k25`) wraps a DeepSeek-V3 text model
(MLA attention, a dense first layer, then routed + shared experts) that AutoModelForCausalLM
does not accept under the wrapper's config. Every stage reads the text model only; this
module says what it is, layer by layer, so that training, export and decoding can choose
per layer instead of assuming a Llama.
"""

from __future__ import annotations

import json
from pathlib import Path

# Checkpoint tensors of towers and heads no stage uses: the vision encoder and its projector,
# and multi-token-prediction layers (Qwen3.6's `mtp.*`, DeepSeek's layer N).
NOT_TEXT = ("visual", "vision", "mm_projector", "mtp")

FULL, LINEAR, SLIDING = "full_attention", "linear_attention", "sliding_attention"


def text_config(config):
    """The decoder's config: `text_config` of a multimodal wrapper, else the config itself."""
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config


def attention_kind(text) -> str:
    """mla (DeepSeek/Kimi latent attention: low-rank K/V with a separate rope part) or gqa."""
    return "mla" if getattr(text, "kv_lora_rank", None) else "gqa"


def layer_types(text) -> list[str]:
    """Each layer's attention: full_attention, linear_attention or sliding_attention."""
    n = int(text.num_hidden_layers)
    declared = getattr(text, "layer_types", None)
    if declared:
        return [str(t) for t in declared][:n]
    window = getattr(text, "sliding_window", None)
    if window and getattr(text, "use_sliding_window", True) and getattr(text, "max_window_layers", None) is not None:
        # Qwen2-style: layers from max_window_layers on slide
        return [SLIDING if i >= text.max_window_layers else FULL for i in range(n)]
    return [FULL] * n


def mlp_types(text) -> list[str]:
    """Each layer's feed-forward: dense or moe."""
    n = int(text.num_hidden_layers)
    experts = getattr(text, "n_routed_experts", None) or getattr(text, "num_experts", None) \
        or getattr(text, "num_local_experts", None)
    if not experts:
        return ["dense"] * n
    if getattr(text, "first_k_dense_replace", None) is not None:  # DeepSeek-V3 / Kimi
        freq = int(getattr(text, "moe_layer_freq", 1) or 1)
        k = int(text.first_k_dense_replace)
        return ["moe" if i >= k and i % freq == 0 else "dense" for i in range(n)]
    dense = set(getattr(text, "mlp_only_layers", None) or [])  # Qwen MoE
    step = int(getattr(text, "decoder_sparse_step", 1) or 1)
    return ["moe" if i not in dense and (i + 1) % step == 0 else "dense" for i in range(n)]


def eos_ids(model_dir: Path, text, tokenizer) -> list[int]:
    """Every id that ends a turn: generation_config.json's eos list (Qwen3.6 lists two), the
    text config's, and the tokenizer's eos. generate() stops on the first of these, so the
    benchmark and regeneration must too."""
    found: set[int] = set()
    gen = Path(model_dir) / "generation_config.json"
    sources = [json.loads(gen.read_text()).get("eos_token_id")] if gen.exists() else []
    sources += [getattr(text, "eos_token_id", None), tokenizer.eos_token_id]
    for e in sources:
        if e is None:
            continue
        found |= {int(x) for x in (e if isinstance(e, list) else [e])}
    return sorted(found)


# Text models whose RMSNorms scale by (1 + weight), weights stored around 0 (Qwen3-Next,
# Qwen3.5/3.6): copied into a plain RMSNorm (z-lab's drafter: weight * x) they need + 1.
OFFSET_NORM_MODELS = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "gemma", "gemma2", "gemma3_text")


def norm_offset(text) -> float:
    return 1.0 if getattr(text, "model_type", None) in OFFSET_NORM_MODELS else 0.0


def describe_layers(text) -> dict:
    """The info file's record of the decoder's layout."""
    return {"attention": attention_kind(text), "layer_types": layer_types(text), "mlp_types": mlp_types(text)}
