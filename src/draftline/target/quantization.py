"""Quantized checkpoints: what format a target ships in, and how transformers must load it.

Kimi K2.x ships its routed experts INT4 in the compressed-tensors format (`weight_packed`,
`weight_scale`, `weight_shape`); Qwen3.x `-FP8` releases ship block-quantized FP8 weights
(`weight_scale_inv` per 128x128 block). Both load through their own library, named by
`quantization_config` in config.json: loaded as if unquantized, their tensors would be missing
(and random) or unexpected, which load_report.py refuses. compressed-tensors weights are
dequantized to the compute dtype as they load, everywhere: its other transformers route
decompresses them at the first forward anyway, so dequantizing once costs no more memory
and is the one path tested. FP8 keeps transformers' own route: FP8 kernels on GPUs that have
them, dequantized on the CPU.
"""

from __future__ import annotations

from typing import Any

from .load import TargetError

# quant_method -> what draftline knows how to load; anything else is refused with a line.
COMPRESSED_TENSORS, FP8 = "compressed-tensors", "fp8"
SUPPORTED = (COMPRESSED_TENSORS, FP8)


def quantization_config(checkpoint_config) -> dict[str, Any] | None:
    """config.json's `quantization_config` as a dict: at the top (Kimi's wrapper, FP8
    releases) or in the text config; None for an unquantized checkpoint."""
    for cfg in (checkpoint_config, _text(checkpoint_config)):
        q = getattr(cfg, "quantization_config", None)
        if q is not None:
            return q if isinstance(q, dict) else q.to_dict()
    return None


def describe_format(checkpoint_config, where: str) -> dict[str, Any] | None:
    """What info.json records of the format: method, storage format and the weight scheme of
    each config group. Refuses a method draftline cannot load, naming it and what to do."""
    q = quantization_config(checkpoint_config)
    if q is None:
        return None
    method = str(q.get("quant_method", "")).replace("_", "-")
    if method not in SUPPORTED:
        raise TargetError(
            f"{where}: quantization_config.quant_method {method or '(none)'!r} is not loadable here (draftline "
            f"loads {' and '.join(SUPPORTED)} checkpoints); use the model's BF16 release or one in those formats")
    if method == FP8:
        return {"method": FP8, "format": q.get("fmt", "e4m3"), "weight_block_size": q.get("weight_block_size"),
                "activation_scheme": q.get("activation_scheme")}
    return {"method": COMPRESSED_TENSORS, "format": q.get("format"), "groups": _groups(q)}


def _groups(q: dict) -> dict[str, dict]:
    out = {}
    for name, group in sorted((q.get("config_groups") or {}).items()):
        w = group.get("weights") or {}
        out[name] = {"targets": group.get("targets"), "type": w.get("type"), "num_bits": w.get("num_bits"),
                     "strategy": w.get("strategy"), "group_size": w.get("group_size"),
                     "symmetric": w.get("symmetric"), "format": group.get("format")}
    return out


def load_kwargs(checkpoint_config, text_config) -> dict[str, Any]:
    """from_pretrained keywords for a quantized checkpoint. A wrapper loaded as its text
    model (Kimi) gets the wrapper's quantization_config on the text config, or transformers
    would load the packed experts as plain weights (and leave the real ones random)."""
    q = quantization_config(checkpoint_config)
    if q is None:
        return {}
    if getattr(text_config, "quantization_config", None) is None:
        text_config.quantization_config = q
    method = str(q.get("quant_method", "")).replace("_", "-")
    if method == COMPRESSED_TENSORS:
        from transformers import CompressedTensorsConfig

        return {"quantization_config": CompressedTensorsConfig(dequantize=True)}
    return {}  # FP8: transformers' quantizer dequantizes by itself where no FP8 matmul runs


def _text(config):
    return config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else None
