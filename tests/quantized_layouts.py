"""Tiny quantized checkpoints in the real releases' formats, written by the real libraries.

- `kimi_int4(folder)`: Kimi K2.x's routed experts INT4 in compressed-tensors' pack-quantized
  format (symmetric, groups of 32, as Moonshot ships them), quantized and packed by the
  `compressed-tensors` package itself; everything else stays BF16/F32 as in the release.
- `qwen_fp8(folder)`: a Qwen3.x `-FP8` release's block-quantized FP8 (e4m3 weights, one
  `weight_scale_inv` per block) for the full-attention and MLP projections.

Each returns the dequantized weights by checkpoint name: the reference a loaded model must
compute with exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

EXPERT = re.compile(r"mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$")
FP8_LINEAR = re.compile(r"language_model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$")
FP8_BLOCK = 32  # the releases use 128; the tiny layouts' widths are 64-256


def kimi_int4(folder: Path) -> dict[str, torch.Tensor]:
    from compressed_tensors.compressors import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.utils import calculate_qparams

    args = QuantizationArgs(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
    scheme = QuantizationScheme(targets=["Linear"], weights=args, format="pack-quantized")
    weights = Path(folder) / "model.safetensors"
    tensors, out, ref = load_file(str(weights)), {}, {}
    for key, w in tensors.items():
        if not EXPERT.search(key):
            out[key] = w
            continue
        groups = w.float().reshape(w.shape[0], -1, args.group_size)
        scale, zero = calculate_qparams(groups.amin(-1), groups.amax(-1), args)
        packed = PackedQuantizationCompressor.compress(
            {"weight": w, "weight_scale": scale.to(w.dtype), "weight_zero_point": zero}, scheme)
        out |= {key[: -len("weight")] + name: t for name, t in packed.items()}
        ref[key] = PackedQuantizationCompressor.decompress(packed, scheme)["weight"]
    save_file(out, str(weights), metadata={"format": "pt"})
    _set_quantization(folder, {
        "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": args.model_dump(),
                                      "input_activations": None, "output_activations": None}},
        # Moonshot's list names every unquantized module; patterns say the same here
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|down)_proj.*",
                   "re:.*vision.*", "re:.*mm_projector.*"],
        "kv_cache_scheme": None})
    return ref


def qwen_fp8(folder: Path) -> dict[str, torch.Tensor]:
    weights = Path(folder) / "model.safetensors"
    tensors, out, ref = load_file(str(weights)), {}, {}
    b = FP8_BLOCK
    for key, w in tensors.items():
        if not FP8_LINEAR.search(key):
            out[key] = w
            continue
        rows, cols = w.shape
        blocks = w.float().reshape(rows // b, b, cols // b, b)
        scale = blocks.abs().amax(dim=(1, 3)) / torch.finfo(torch.float8_e4m3fn).max
        q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
        out[key] = q.reshape(rows, cols)
        out[key[: -len("weight")] + "weight_scale_inv"] = scale
        ref[key] = (q.float() * scale[:, None, :, None]).reshape(rows, cols)
    save_file(out, str(weights), metadata={"format": "pt"})
    _set_quantization(folder, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [b, b],
                               "modules_to_not_convert": ["lm_head", "model.visual", "linear_attn", "mlp.gate"]})
    return ref


def _set_quantization(folder: Path, config: dict) -> None:
    path = Path(folder) / "config.json"
    cfg = json.loads(path.read_text())
    cfg["quantization_config"] = config
    path.write_text(json.dumps(cfg, indent=2))
