"""How a shard stores its hidden states (`extract.state_dtype`): bf16, or FP8 e4m3 with one
float32 scale per token and state (a captured layer, or the final state).

FP8 halves the bytes of the states, which are nearly all of a shard's (61 KB a token at 27B
width in bf16). Each state of each token is scaled so that its largest magnitude lands on
e4m3's largest finite value (448), as speculators' FP8 hidden states are: one outlier token
or layer then costs precision only in itself. e4m3 keeps 3 mantissa bits: a stored value is
within 2^-4 of its own magnitude, or, below 1/28,672 of its state's largest (e4m3's
subnormals), within 2^-10 of the scale.

The writer quantizes (shard_file.py) from the bf16 rows the state check has seen; readers
get the FP8 values and their scales, and `widen` turns them into float32 on the device the
drafter runs on, one multiply per value, so every loader and device gives the same numbers.
"""

from __future__ import annotations

import torch

STATE_DTYPES = {"bfloat16": torch.bfloat16, "float8_e4m3fn": torch.float8_e4m3fn}
# What a safetensors header calls each (the shard's own record of its format).
SAFETENSORS_NAMES = {"bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3"}
E4M3_MAX = 448.0
SCALE_BYTES = 4  # float32
ROWS = 256  # tokens quantized per pass: 31 MB of float32 at 27B width (6 x 5120 columns)


def is_fp8(state_dtype: str) -> bool:
    return state_dtype == "float8_e4m3fn"


def itemsize(state_dtype: str) -> int:
    return STATE_DTYPES[state_dtype].itemsize


def of_header(name: str, path) -> str:
    """The state_dtype a shard header's `states` entry names; one line if it is neither."""
    for state_dtype, header_name in SAFETENSORS_NAMES.items():
        if header_name == name:
            return state_dtype
    raise ValueError(f"{path}: states stored as {name}, which no draftline version writes")


def quantize(states: torch.Tensor, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, G x hidden] states -> ([n, G x hidden] float8_e4m3fn, [n, G] float32 scales),
    one scale per token and state: its largest magnitude / 448 (an all-zero state: 1, and
    it stays zero). A non-finite state stays non-finite (NaN), for the state check to name."""
    n, cols = states.shape
    groups = cols // hidden
    q = torch.empty(n, cols, dtype=torch.float8_e4m3fn, device=states.device)
    scales = torch.empty(n, groups, dtype=torch.float32, device=states.device)
    for a in range(0, n, ROWS):
        v = states[a : a + ROWS].reshape(-1, groups, hidden)
        amax = torch.linalg.vector_norm(v, float("inf"), dim=-1, dtype=torch.float32)
        scale = torch.where(amax > 0, amax / E4M3_MAX, 1.0)
        # The largest lands within rounding of 448, which e4m3 rounds to 448, never past it.
        q[a : a + ROWS] = torch.mul(v, (1.0 / scale)[..., None]).reshape(v.shape[0], cols).to(torch.float8_e4m3fn)
        scales[a : a + ROWS] = scale
    return q, scales


def widen(states: torch.Tensor, scales: torch.Tensor | None) -> torch.Tensor:
    """Stored states [..., G x hidden] (bf16, or FP8 with [..., G] scales) -> float32, on the
    device they are on: move them to the compute device first (half the bytes over the bus)."""
    if scales is None:
        return states.float()
    groups = scales.shape[-1]
    v = states.float().unflatten(-1, (groups, -1)) * scales.to(states.device, torch.float32).unsqueeze(-1)
    return v.flatten(-2)
