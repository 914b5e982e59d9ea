"""Build, save and load drafters as z-lab's `dflash.model.DFlashDraftModel`.

We train the reference class itself (not a re-implementation), so a checkpoint we save
is by construction what `DFlashDraftModel.from_pretrained` loads and `dflash_generate` runs.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..config import DrafterParams


class DrafterError(ValueError):
    pass


def mask_token_id(tokenizer, token: str) -> int:
    ids = tokenizer.convert_tokens_to_ids([token])
    tid = ids[0] if ids else None
    if tid is None or tid == tokenizer.unk_token_id and token != tokenizer.unk_token:
        raise DrafterError(f"drafter.mask_token: {token!r} is not a single token of the target's vocabulary")
    return int(tid)


def drafter_config(target_config, drafter: DrafterParams, layer_ids: list[int], mask_id: int):
    from transformers import Qwen3Config

    tc = target_config
    n_heads = int(tc.num_attention_heads)
    head_dim = int(getattr(tc, "head_dim", None) or tc.hidden_size // n_heads)
    rope = getattr(tc, "rope_parameters", None) or {"rope_type": "default",
                                                     "rope_theta": getattr(tc, "rope_theta", 10000.0)}
    cfg = Qwen3Config(
        vocab_size=int(tc.vocab_size),
        hidden_size=int(tc.hidden_size),
        intermediate_size=int(tc.intermediate_size),
        num_hidden_layers=drafter.num_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=int(getattr(tc, "num_key_value_heads", n_heads)),
        head_dim=head_dim,
        hidden_act=getattr(tc, "hidden_act", "silu"),
        max_position_embeddings=int(getattr(tc, "max_position_embeddings", 8192)),
        rms_norm_eps=float(getattr(tc, "rms_norm_eps", 1e-6)),
        rope_parameters=dict(rope),
        attention_bias=False,
        tie_word_embeddings=False,
        use_cache=True,
        layer_types=["full_attention"] * drafter.num_layers,
    )
    cfg.architectures = ["DFlashDraftModel"]
    cfg.num_target_layers = int(tc.num_hidden_layers)
    cfg.block_size = drafter.block_size
    cfg.dflash_config = {"block_size": drafter.block_size, "mask_token_id": mask_id,
                         "target_layer_ids": list(layer_ids)}
    return cfg


def build_drafter(config, seed: int):
    from dflash.model import DFlashDraftModel

    torch.manual_seed(seed)
    model = DFlashDraftModel(config)
    return model.float()


def load_drafter(path: str | Path, dtype=torch.float32):
    from dflash.model import DFlashDraftModel

    return DFlashDraftModel.from_pretrained(str(path), dtype=dtype, attn_implementation="sdpa").eval()
