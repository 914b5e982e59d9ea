"""Build, save and load drafters as z-lab's `dflash.model.DFlashDraftModel` (or its
`DFlash2DraftModel`, `drafter.arch: dflash2`).

We train the reference class itself (not a re-implementation), so a checkpoint we save
is by construction what `from_pretrained` loads and `dflash_generate` runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..target.layout import attention_kind, text_config
from .serving import serving_fields

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.drafter import DrafterParams


class DrafterError(ValueError):
    pass


def mask_token_id(tokenizer, token: str | int, vocab_size: int) -> int:
    """The mask token's id: a token of the tokenizer by name, or an id inside the target's
    embedding (a spare row past the tokenizer's last id is fine: nothing decodes it)."""
    if isinstance(token, int):
        if not 0 <= token < vocab_size:
            raise DrafterError(f"drafter.mask_token: id {token} is outside the target's embedding "
                               f"(0..{vocab_size - 1}); SGLang and vLLM need it inside")
        return token
    ids = tokenizer.convert_tokens_to_ids([token])
    tid = ids[0] if ids else None
    if tid is None or tid == tokenizer.unk_token_id and token != tokenizer.unk_token:
        raise DrafterError(f"drafter.mask_token: {token!r} is not a single token of the target's vocabulary "
                           "(give a spare row's id instead)")
    return int(tid)


def drafter_shape(tc, drafter: DrafterParams) -> dict:
    """Heads, head width and MLP width: the params', else the target's. An MLA target
    (Kimi, DeepSeek) has no plain head_dim or key/value heads: its qk_rope_head_dim (64) is
    only the rotary part of a key, so the drafter takes v_head_dim and 8 key/value heads, as
    z-lab's Kimi-K2.5 drafter (64 heads, 8 key/value heads, head_dim 128)."""
    mla = attention_kind(tc) == "mla"
    heads = drafter.num_attention_heads or int(tc.num_attention_heads)
    if mla:
        kv = drafter.num_key_value_heads or min(8, heads)
        head_dim = drafter.head_dim or int(tc.v_head_dim)
    else:
        kv = drafter.num_key_value_heads or int(getattr(tc, "num_key_value_heads", None) or heads)
        head_dim = drafter.head_dim or int(getattr(tc, "head_dim", None) or tc.hidden_size // heads)
    if heads % kv:
        raise DrafterError(f"drafter.num_key_value_heads: {kv} does not divide the {heads} attention heads")
    return {"num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
            "intermediate_size": drafter.intermediate_size or int(tc.intermediate_size)}


# Rotary keys of the target that do not describe the drafter: it rotates its whole head
# (Qwen3 attention) over plain 1-D positions, whatever share or sections the target rotates.
TARGET_ONLY_ROPE = ("partial_rotary_factor", "mrope_section", "mrope_interleaved")


def drafter_rope(tc) -> dict:
    """The target's rotary base and scaling (theta, yarn factor), minus what the drafter
    does not run."""
    rope = dict(getattr(tc, "rope_parameters", None) or {})
    if not rope:
        rope = {"rope_type": "default", "rope_theta": getattr(tc, "rope_theta", 10000.0)}
    for key in TARGET_ONLY_ROPE:
        rope.pop(key, None)
    return rope


def drafter_config(target_config, drafter: DrafterParams, layer_ids: list[int], mask_id: int):
    from transformers import Qwen3Config

    tc = text_config(target_config)
    layer_types = list(drafter.layer_types or ["full_attention"] * drafter.num_layers)
    serving = serving_fields(layer_types, drafter.sliding_window, drafter.block_size, mask_id, layer_ids,
                             int(tc.num_hidden_layers), int(tc.hidden_size))
    cfg = Qwen3Config(
        vocab_size=int(tc.vocab_size),
        hidden_size=int(tc.hidden_size),
        num_hidden_layers=drafter.num_layers,
        **drafter_shape(tc, drafter),
        hidden_act=getattr(tc, "hidden_act", "silu"),
        max_position_embeddings=int(getattr(tc, "max_position_embeddings", 8192)),
        rms_norm_eps=float(getattr(tc, "rms_norm_eps", 1e-6)),
        rope_parameters=drafter_rope(tc),
        attention_bias=False,
        tie_word_embeddings=False,
        use_cache=True,
        layer_types=layer_types,
        sliding_window=serving.pop("sliding_window"),
        use_sliding_window=serving.pop("use_sliding_window"),
    )
    cfg.architectures = [ARCHITECTURES[drafter.arch]]
    # also top level: transformers 4.57 (z-lab's pin) reads no rope_parameters, and would
    # rotate with its 1e6 default; transformers 5 folds it back into rope_parameters.
    cfg.rope_theta = cfg.rope_parameters["rope_theta"]
    for key, value in serving.items():
        setattr(cfg, key, value)
    if drafter.arch == "dflash2":
        d2 = drafter.dflash2
        if cfg.hidden_size % d2.conv_group_size:
            raise DrafterError(f"drafter.dflash2.conv_group_size: {d2.conv_group_size} does not divide the "
                               f"hidden size {cfg.hidden_size}")
        if d2.selector_top_k > cfg.vocab_size:
            raise DrafterError(f"drafter.dflash2.selector_top_k: {d2.selector_top_k} is more than the "
                               f"vocabulary ({cfg.vocab_size})")
        # The four keys that switch DFlash2 on in z-lab's code, vLLM and SGLang.
        cfg.dflash_config.update(conv_kernel_size=d2.conv_kernel_size, conv_group_size=d2.conv_group_size,
                                 selector_rank=d2.selector_rank, selector_top_k=d2.selector_top_k)
    return cfg


ARCHITECTURES = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel"}
# DFlash2 checkpoints (z-lab's, and what vLLM and SGLang load) store the selector's two
# codebooks as bare tensors; DFlash2DraftModel.from_pretrained maps them onto `.weight`.
_BARE = ("candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook")


def _model_class(config):
    from dflash.model import DFlash2DraftModel, DFlashDraftModel

    return DFlash2DraftModel if "DFlash2DraftModel" in (config.architectures or []) else DFlashDraftModel


def build_drafter(config, seed: int):
    from .dflash2 import identity_convs

    torch.manual_seed(seed)
    model = _model_class(config)(config)
    identity_convs(model)  # DFlash2: start as the DFlash backbone; DFlash: nothing to do
    return model.float()


# What a saved drafter folder holds: one weights file whatever the size (dvc.yaml declares
# each file, so the model card written beside them by the benchmark stage has its own owner).
DRAFTER_FILES = ("config.json", "model.safetensors")


def save_drafter(drafter, path: str | Path) -> None:
    """save_pretrained, with DFlash2's codebooks under the names its loaders expect."""
    drafter.save_pretrained(str(path), safe_serialization=True, max_shard_size="1000GB")
    written = sorted(p.name for p in Path(path).iterdir())
    if written != sorted(DRAFTER_FILES):
        raise DrafterError(f"{path}: save_pretrained wrote {written}, expected {sorted(DRAFTER_FILES)}")
    if "DFlash2DraftModel" not in (drafter.config.architectures or []):
        return
    from safetensors.torch import load_file, save_file

    files = sorted(Path(path).glob("*.safetensors"))
    if len(files) != 1:
        raise DrafterError(f"{path}: expected one safetensors file, found {len(files)}")
    tensors = load_file(str(files[0]))
    for name in _BARE:
        tensors[name] = tensors.pop(f"{name}.weight")
    tmp = files[0].with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(files[0])


def load_drafter(path: str | Path, dtype=torch.float32):
    from transformers import AutoConfig

    cls = _model_class(AutoConfig.from_pretrained(str(path)))
    return cls.from_pretrained(str(path), dtype=dtype, attn_implementation="sdpa").eval()
