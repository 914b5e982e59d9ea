"""Block attention computes the dense masked attention of a training batch."""

import pytest
import torch
import torch.nn.functional as F

from draftline.config.drafter import DrafterParams
from draftline.drafter import blocks
from draftline.drafter.block_attention import block_attention, routed
from draftline.hidden.store import Sequence


def _batch(lengths, anchors_per_seq, B, feat, gen):
    seqs = []
    for i, n in enumerate(lengths):
        ids = torch.randint(0, 40, (n,), generator=gen)
        mask = (torch.arange(n) >= n // 3).float()
        seqs.append(Sequence(f"s{i}", "train", torch.randn(n, feat, generator=gen, dtype=torch.float64),
                             torch.randn(n, 3, generator=gen), ids, mask))
    anchors = [blocks.sample_anchors(s.loss_mask, anchors_per_seq, gen, prompt_anchors=2) for s in seqs]
    return blocks.build(seqs, anchors, B, 39, 2.0)


def test_kernel_equals_dense_masked_sdpa_with_grouped_heads():
    gen = torch.Generator().manual_seed(0)
    batch = _batch([23, 11], 4, 4, 8, gen)  # the second sequence has fewer anchors: padded blocks
    b, A, L = batch.ctx_visible.shape
    Q, H, Hkv, d = A * 4, 4, 2, 8
    q = torch.randn(b, H, Q, d, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, Hkv, L + Q, d, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, Hkv, L + Q, d, dtype=torch.float64, requires_grad=True)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=batch.attention_mask, enable_gqa=True, scale=0.3)
    got = block_attention(q, k, v, batch.layout(), 0.3)
    assert got.shape == (b, Q, H, d)
    assert torch.allclose(got, ref.transpose(1, 2), atol=1e-12)
    probe = torch.randn(b, Q, H, d, dtype=torch.float64)
    g_ref = torch.autograd.grad((ref.transpose(1, 2) * probe).sum(), (q, k, v))
    g_got = torch.autograd.grad((got * probe).sum(), (q, k, v))
    for x, y in zip(g_ref, g_got):
        assert torch.allclose(x, y, atol=1e-12)


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (2, 2)])
def test_drafter_forward_and_gradients_match_sdpa(heads, kv_heads):
    """z-lab's drafter, routed through block attention, equals its own sdpa path."""
    from transformers import LlamaConfig

    from draftline.drafter.model import build_drafter, drafter_config

    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=128)
    drafter = build_drafter(drafter_config(cfg, DrafterParams(num_layers=2, block_size=4), [0, 2], 39), 0).double()
    gen = torch.Generator().manual_seed(1)
    batch = _batch([30, 17], 5, 4, 64, gen)
    noise = torch.randn(*batch.block_ids.shape, 32, generator=gen, dtype=torch.float64)
    inputs = dict(position_ids=batch.position_ids, noise_embedding=noise, target_hidden=batch.context)

    def run(**kw):
        drafter.zero_grad()
        out = drafter(**inputs, **kw)
        (out * torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)).sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in drafter.named_parameters()}

    ref, g_ref = run(attention_mask=batch.attention_mask)
    with routed():
        got, g_got = run(block_layout=batch.layout())
    assert torch.allclose(got, ref, atol=1e-10)
    for name in g_ref:
        assert torch.allclose(g_got[name], g_ref[name], atol=1e-10), name


def test_routing_is_scoped_and_leaves_other_calls_alone():
    from dflash.model import ALL_ATTENTION_FUNCTIONS as registry

    before = registry["sdpa"]
    q = torch.randn(1, 2, 3, 4)
    k = v = torch.randn(1, 2, 5, 4)

    class M(torch.nn.Module):
        num_key_value_groups = 1
        is_causal = False

    plain, _ = before(M(), q, k, v, None, scaling=0.5)
    with routed():
        assert registry["sdpa"] is not before
        routed_plain, _ = registry["sdpa"](M(), q, k, v, None, scaling=0.5)
    assert registry["sdpa"] is before
    assert torch.equal(plain, routed_plain)


@pytest.mark.parametrize("window,causal", [(3, True), (6, True), (2, False)])
def test_sliding_and_causal_kernels_equal_their_dense_masks(window, causal):
    gen = torch.Generator().manual_seed(2)
    batch = _batch([23, 11], 4, 4, 8, gen)
    b, A, L = batch.ctx_visible.shape
    Q = A * 4
    q = torch.randn(b, 2, Q, 8, dtype=torch.float64)
    k = torch.randn(b, 2, L + Q, 8, dtype=torch.float64)
    v = torch.randn(b, 2, L + Q, 8, dtype=torch.float64)
    layout = batch.layout()
    mask = layout.mask(window, causal)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    got = block_attention(q, k, v, layout, 0.3, window, causal)
    assert torch.allclose(got, ref.transpose(1, 2), atol=1e-12)
    # slot k of the block at anchor a sees context positions a + k - window < l < a only
    a, slot = int(layout.anchors[0, 1]), 2
    row = mask[0, 0, 1 * 4 + slot, :L]
    assert row.nonzero().flatten().tolist() == list(range(max(0, a + slot - window + 1), a))


@pytest.mark.parametrize("dense", [False, True])
def test_training_sees_what_inference_sees_in_sliding_layers(dense):
    """A drafter with a sliding (causal, windowed) and a full layer: a block's hidden states in
    the training layout equal z-lab's own inference forward over [context < anchor, block]."""
    from transformers import LlamaConfig

    from draftline.drafter.model import build_drafter, drafter_config

    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    dp = DrafterParams(num_layers=2, block_size=4, layer_types=["sliding_attention", "full_attention"],
                       sliding_window=5)
    drafter = build_drafter(drafter_config(cfg, dp, [0, 2], 39), 0).double().eval()
    gen = torch.Generator().manual_seed(3)
    batch = _batch([30], 5, 4, 64, gen)
    noise = torch.randn(*batch.block_ids.shape, 32, generator=gen, dtype=torch.float64)
    with torch.no_grad(), routed():
        trained = drafter(position_ids=batch.position_ids, noise_embedding=noise, target_hidden=batch.context,
                          block_layout=batch.layout(dense=dense))
    L = batch.context.shape[1]
    for a_i, a in enumerate(batch.layout().anchors[0].tolist()):
        block = slice(a_i * 4, a_i * 4 + 4)
        with torch.no_grad():
            alone = drafter(position_ids=torch.arange(a + 4)[None], noise_embedding=noise[:, block],
                            target_hidden=batch.context[:, :a])
        assert torch.allclose(trained[:, block], alone, atol=1e-10), a
    assert L > 5  # the window cuts the context for late anchors
