"""`extract.backend: vllm` on a GPU against the transformers path, on both tiny real-target
layouts (tests/vllm_parity.py): the Qwen3.6 layout's states agree within bf16 tolerance and
none is all-zero; the Kimi layout (MLA) is refused in one line before vLLM starts.

Marked `gpu` (skipped without CUDA, conftest.py) and skipped without the `gpu` extra's vllm:

    .venv/bin/python -m pytest -m gpu tests/gpu/test_vllm_parity.py
"""

import importlib.util

import pytest
from vllm_parity import LAYOUTS, REL_TOL, check

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs the gpu extra (vllm)")]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_vllm_backend_stores_what_the_transformers_path_does(layout, tmp_path):
    result = check(layout, tmp_path)  # raises ParityError, naming what differs
    print(result)
    if layout == "kimi-k2.6":
        assert result["refused"].startswith("extract.backend: vllm: MLA targets (Kimi_K25ForConditionalGeneration)")
    else:
        assert result["rows"] == 12 and result["zero_states"] == 0
        assert all(v <= REL_TOL for v in result["max_rel_err"].values())
