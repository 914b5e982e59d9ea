"""The target's tensors by name, one at a time: what training needs of the target.

Training reads the target's input embedding and LM head (and, with `train.init: target`,
the decoder layers it starts from) straight from the safetensors files, so a 27B or 1T
target's other weights stay off every training process.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..io import read_json
from .layout import NOT_TEXT
from .load import TargetError, model_path


def is_other_tower(key: str) -> bool:
    """A tensor of the vision tower, its projector or an MTP head: never the text model's."""
    return any(part in key for part in NOT_TEXT)


class Tensors:
    """Named tensors of a safetensors checkpoint (one file or sharded), read one at a time
    so that a 27B or 1T target's other weights stay off every training process."""

    def __init__(self, model_dir: str | Path):
        from safetensors import safe_open

        self.path = path = model_path(model_dir)
        index = path / "model.safetensors.index.json"
        if index.exists():
            self.weight_map = read_json(index)["weight_map"]
        else:
            single = path / "model.safetensors"
            if not single.exists():
                raise TargetError(f"{path}: no model.safetensors(.index.json)")
            with safe_open(str(single), "pt") as f:
                self.weight_map = {k: single.name for k in f.keys()}

    def find(self, suffix: str) -> str | None:
        keys = sorted(k for k in self.weight_map if k.endswith(suffix) and not is_other_tower(k))
        return min(keys, key=len) if keys else None

    def read(self, key: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(str(self.path / self.weight_map[key]), "pt") as f:
            return f.get_tensor(key).float()


def load_io_weights(model_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embedding and LM head: all that training needs of the target
    besides the stored hidden states."""
    t = Tensors(model_dir)
    emb_key = t.find("embed_tokens.weight")
    if emb_key is None:
        raise TargetError(f"{t.path}: no '*embed_tokens.weight' tensor in the checkpoint")
    embed = t.read(emb_key)
    head_key = t.find("lm_head.weight")
    # Tied embeddings (SmolLM2, small Qwen3): the head is the embedding matrix.
    head = t.read(head_key) if head_key else embed
    return embed, head


# The tensors of a decoder layer that can seed a drafter layer (z-lab's drafter is Qwen3
# attention + a SwiGLU MLP), under a dense Llama/Qwen layer's names; MoE layers offer their
# shared expert. Whatever a layer lacks (linear attention, MLA, routed experts) is simply
# absent, and drafter/init_target.py decides what to do instead.
LAYER_TENSORS = ("input_layernorm.weight", "post_attention_layernorm.weight",
                 "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                 "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                 "mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight",
                 "mlp.shared_experts.down_proj.weight")


def layer_prefix(t: Tensors, i: int) -> str:
    prefix = next((k[: k.index(f"layers.{i}.") + len(f"layers.{i}.")] for k in sorted(t.weight_map, key=len)
                   if f"layers.{i}.input_layernorm.weight" in k and not is_other_tower(k)), None)
    if prefix is None:
        raise TargetError(f"{t.path}: no decoder layer {i} ('*layers.{i}.input_layernorm.weight')")
    return prefix


def read_layer(t: Tensors, i: int, names: tuple[str, ...] = LAYER_TENSORS) -> dict[str, torch.Tensor]:
    """Decoder layer i's tensors of `names` that it has (name within the layer -> tensor)."""
    prefix = layer_prefix(t, i)
    # Only the tensors copied matter: Kimi quantizes its routed experts alone, which no
    # drafter layer copies; a quantized attention or MLP weight copied raw would be garbage.
    scaled = sorted(k for name in names for k in _quantized_parts(prefix + name) if k in t.weight_map)
    if scaled:
        raise TargetError(f"{t.path}: layer {i} is quantized ('{scaled[0]}'); train.init: target needs "
                          "unquantized weights (use train.init: random)")
    return {name: t.read(prefix + name) for name in names if prefix + name in t.weight_map}


def _quantized_parts(key: str) -> list[str]:
    """The names a quantized weight's scales and packed values take (FP8 blocks, compressed-tensors)."""
    stem = key[: -len("weight")] if key.endswith("weight") else key + "_"
    return [stem + part for part in ("weight_scale_inv", "weight_scale", "weight_packed")]


def final_norm(t: Tensors) -> torch.Tensor:
    key = t.find("model.norm.weight") or t.find("language_model.norm.weight") or t.find(".norm.weight")
    if key is None:
        raise TargetError(f"{t.path}: no final norm ('*norm.weight')")
    return t.read(key)
