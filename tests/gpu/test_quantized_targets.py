"""Quantized releases on a GPU: the tiny Kimi-layout target with compressed-tensors INT4
experts and the tiny Qwen3.6-layout one with block FP8 (tests/quantized_layouts.py) load on
CUDA and compute what their CPU load computes, within bf16 (FP8: its kernels') tolerance.

Marked `gpu`: skipped without CUDA (conftest.py).

    .venv/bin/python -m pytest -m gpu tests/gpu/test_quantized_targets.py
"""

import pytest
import torch
from quantized_layouts import kimi_int4, qwen_fp8
from tiny_layouts import kimi26_target, qwen36_target

from draftline.target.load import load_model

pytestmark = pytest.mark.gpu

IDS = torch.tensor([[5, 17, 230, 1024, 77, 3, 991, 12, 40, 41, 600, 7]])
LAYOUTS = {"kimi-int4": (kimi26_target, kimi_int4), "qwen3.6-fp8": (lambda f: qwen36_target(f, num_layers=4), qwen_fp8)}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_quantized_target_computes_on_cuda_what_it_does_on_the_cpu(layout, tmp_path):
    build, quantize = LAYOUTS[layout]
    folder = build(tmp_path / "model")
    quantize(folder)
    with torch.inference_mode():
        cpu = load_model(folder, "float32", "cpu")(IDS).logits
        gpu = load_model(folder, "bfloat16", "cuda")(IDS.cuda()).logits.float().cpu()
    err = (gpu - cpu).abs().max() / cpu.abs().max()
    print(f"{layout}: max |cuda bf16 - cpu f32| / max |logit| = {err:.4f}")
    assert err < 0.05  # bf16 activations over 4 layers; a random or misread tensor is off by ~1
