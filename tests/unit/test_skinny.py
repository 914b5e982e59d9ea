"""Few-row decoding products: the same numbers as `linear`, routed only where asked."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from draftline.decode import chain as S
from draftline.decode.skinny import SKINNY_ROWS, skinny_linears, skinny_product


@pytest.mark.parametrize("rows", [1, 2, 3, 4, SKINNY_ROWS, SKINNY_ROWS + 1])
@pytest.mark.parametrize("bias", [False, True])
def test_skinny_product_equals_linear(rows, bias):
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(96, 40, generator=g, dtype=torch.float64)
    b = torch.randn(96, generator=g, dtype=torch.float64) if bias else None
    x2 = torch.randn(rows, 40, generator=g, dtype=torch.float64)
    x3 = torch.randn(1, rows + 1, 40, generator=g, dtype=torch.float64)[:, 1:, :]  # a strided block slice
    for x in (x2, x3):
        out = skinny_product(x, w, b)
        assert out.shape == (*x.shape[:-1], 96)
        assert out.is_contiguous()  # sdpa's CPU flash kernel falls back to the math path otherwise
        torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-12, atol=1e-12)


def test_skinny_linears_routes_linear_layers_inside_the_block_only(tiny):
    target, _ = tiny
    ids = torch.tensor([[1, 2, 3, 4]])
    calls = []
    real = skinny_product

    def spy(x, w, b=None):
        calls.append(x.shape[:-1].numel())
        return real(x, w, b)

    linears = [m for m in target.modules() if type(m) is nn.Linear]
    with torch.no_grad():
        before = target(ids).logits
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("draftline.decode.skinny.skinny_product", spy)
            with skinny_linears(target):
                inside = target(ids).logits
        assert len(calls) == len(linears)  # every projection and the LM head, once each
        assert all("forward" not in vars(m) for m in linears)  # the modules are as they were
        calls.clear()
        after = target(ids).logits
    assert not calls
    torch.testing.assert_close(inside, before, rtol=1e-5, atol=1e-5)
    assert torch.equal(after, before)


def test_greedy_speculative_equals_plain_greedy_with_skinny_linears(tiny):
    target, drafter = tiny
    with skinny_linears(target, drafter):
        for prompt in ([1, 2, 3], [4, 0, 1, 1, 2]):
            ids = torch.tensor([prompt])
            plain = S.plain(target, ids, 12, [])
            spec = S.speculative(drafter, target, ids, 12, [])
            assert spec.tokens == plain.tokens
