"""Compute dtypes: `auto` resolution, the bf16 target's LM head on strided inputs, and
regeneration rows keyed by the dtype that produced them."""

import torch

from draftline.precision import batch_dtype, bf16_units
from draftline.regenerate.store import target_fingerprint
from draftline.target.load import _contiguous_input, load_model


def test_auto_follows_the_hardware_and_explicit_choices_pass_through():
    assert batch_dtype("float32", "bfloat16") == "float32"
    assert batch_dtype("bfloat16", "float32") == "bfloat16"
    assert batch_dtype("auto", "float32") == ("bfloat16" if bf16_units() else "float32")
    assert batch_dtype("auto", "float16", torch.device("cuda")) == "bfloat16"


def test_head_input_hook_copies_only_strided_views():
    h = torch.randn(3, 5, 8)
    view = h[:, -1:, :]
    (out,) = _contiguous_input(None, (view,))
    assert out.is_contiguous() and torch.equal(out, view)
    assert _contiguous_input(None, (h,)) is None


def test_bf16_target_last_position_logits_match_the_full_forward(target_dir, tokenizer):
    model = load_model(target_dir, "bfloat16")
    ids = torch.tensor([tokenizer.encode("def add(a, b):\n    return a + b\n\nprint(add(2, 3))")] * 2)
    with torch.inference_mode():
        last = model(ids, logits_to_keep=1).logits[:, -1]  # the head sees a strided view
        full = model(ids).logits[:, -1]
    assert last.dtype == torch.bfloat16
    assert torch.equal(last.argmax(-1), full.argmax(-1))
    torch.testing.assert_close(last.float(), full.float(), atol=0.1, rtol=0.02)


def test_regeneration_key_changes_with_the_compute_dtype(target_dir):
    plain = target_fingerprint(target_dir)
    assert target_fingerprint(target_dir, "float32") != target_fingerprint(target_dir, "bfloat16")
    assert target_fingerprint(target_dir, "float32").startswith(plain)
