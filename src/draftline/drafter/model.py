"""Build, save and load drafters as z-lab's `dflash.model.DFlashDraftModel` (or its
`DFlash2DraftModel`, `drafter.arch: dflash2`).

We train the reference class itself (not a re-implementation), so a checkpoint we save
is by construction what `from_pretrained` loads and `dflash_generate` runs.
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
    cfg.architectures = [ARCHITECTURES[drafter.arch]]
    cfg.num_target_layers = int(tc.num_hidden_layers)
    cfg.block_size = drafter.block_size
    cfg.dflash_config = {"block_size": drafter.block_size, "mask_token_id": mask_id,
                         "target_layer_ids": list(layer_ids)}
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


def target_init_layers(num_target_layers: int, layer_ids: list[int], num_layers: int) -> list[int]:
    """The target layers a drafter of `num_layers` layers starts from: those right after the
    deepest captured layer (they were trained to read its output), else the last ones."""
    start = min(max(layer_ids) + 1, num_target_layers - num_layers)
    return list(range(max(start, 0), max(start, 0) + num_layers))


@torch.no_grad()
def init_from_target(drafter, layers: list[dict[str, torch.Tensor]], final_norm: torch.Tensor) -> None:
    """Start the drafter as the target's own next layers over its deepest captured state.

    Drafter layer i takes the weights of target layer `target_init_layers(...)[i]`, its final
    norm the target's, and `fc` reads only the deepest captured layer (identity block), with
    `hidden_norm` the first copied layer's input norm: so at step 0 the context keys and
    values of the first layer are exactly that target layer's own. The noise stream still
    starts from token embeddings, which training adapts to. With few hundred training
    sequences this prior is worth more than a random start (bench/RESULTS.md).
    """
    if len(layers) != len(drafter.layers):
        raise DrafterError(f"init_from_target: {len(layers)} target layers for {len(drafter.layers)} drafter layers")
    for layer, weights in zip(drafter.layers, layers):
        own = dict(layer.named_parameters())
        for name, w in weights.items():
            if own[name].shape != w.shape:
                raise DrafterError(f"init_from_target: {name} is {tuple(w.shape)} in the target, "
                                   f"{tuple(own[name].shape)} in the drafter")
            own[name].copy_(w)
    drafter.norm.weight.copy_(final_norm)
    hidden = drafter.norm.weight.shape[0]
    deepest = max(range(len(drafter.target_layer_ids)), key=lambda j: drafter.target_layer_ids[j])
    drafter.fc.weight.zero_()
    drafter.fc.weight[:, deepest * hidden:(deepest + 1) * hidden] = torch.eye(hidden)
    drafter.hidden_norm.weight.copy_(layers[0]["input_layernorm.weight"])
