"""Which dtype a forward pass runs in.

bf16 pays only where the hardware multiplies bf16 natively: CUDA, and CPUs with AMX or
AVX512-BF16. Elsewhere PyTorch emulates it and it is slower than float32.
"""

from __future__ import annotations

import torch


def bf16_units(device: torch.device = torch.device("cpu")) -> bool:
    if device.type == "cuda":
        return True
    cpu = torch.cpu
    return bool(getattr(cpu, "_is_amx_tile_supported", lambda: False)()
                or getattr(cpu, "_is_avx512_bf16_supported", lambda: False)())


def batch_dtype(choice: str, fallback: str, device: torch.device = torch.device("cpu")) -> str:
    """`auto`: bfloat16 where the hardware has bf16 units, else `fallback` (the target's dtype)."""
    if choice != "auto":
        return choice
    return "bfloat16" if bf16_units(device) else fallback
