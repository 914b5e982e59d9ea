"""Attention of a training batch without its dead key columns.

In a training batch (blocks.py) each block of B slots sees the context before its anchor
and its own B slots, nothing else. A dense masked `sdpa` call over the L context keys and
the A*B block keys still computes every query row against all A*B block keys, of which
it may see only B; at CPU sequence lengths (L of a few hundred, A*B = 512) that dead part
is half of the attention work or more. Here the context part is one product masked by
anchor position and the own-block part a batched [B x B] product, softmaxed together:
the same attention, and training steps 1.25x faster in bf16, 1.10x in float32 on
the default data (`bench/bench_block_attention.py`). It materialises the scores (no flash tiling), which
fits CPU sizes; GPU runs, with long sequences and many anchors, keep sdpa
(`train.attention: auto`).

z-lab's attention layer calls `ALL_ATTENTION_FUNCTIONS["sdpa"]` by name and passes its
extra forward arguments through, so `routed()` puts a dispatcher under that name for the
duration of a forward: calls that carry a `block_layout` come here, all others go to the
original function unchanged.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BlockLayout:
    ctx_len: int  # L: the keys before the A*B block keys
    block_size: int  # B
    ctx_visible: torch.Tensor  # [b, A, L] bool: block a sees context position l
    anchors: torch.Tensor  # [b, A] long: block a's position (its slot 0)
    dense: bool = False  # sdpa over a dense mask (GPU) instead of block_attention

    def to(self, device) -> "BlockLayout":
        return BlockLayout(self.ctx_len, self.block_size, self.ctx_visible.to(device), self.anchors.to(device),
                           self.dense)

    def ctx_mask(self, window: int | None) -> torch.Tensor:
        """[b, A, B, L] bool: slot k of block a sees context position l. A sliding layer
        sees only the last `window` positions up to its own (l > a + k - window), as z-lab's
        attention, vLLM and SGLang run it."""
        B = self.block_size
        vis = self.ctx_visible[:, :, None, :].expand(-1, -1, B, -1)
        if window is not None:
            dev = self.ctx_visible.device
            lo = self.anchors[:, :, None, None] + torch.arange(B, device=dev)[None, None, :, None] - window
            vis = vis & (torch.arange(self.ctx_len, device=dev)[None, None, None, :] > lo)
        return vis

    def own_mask(self, window: int | None, causal: bool) -> torch.Tensor:
        """[B, B] bool: slot i sees slot j of its own block (all of them in a full layer;
        j <= i in a causal one, and within the window in a sliding one)."""
        i = torch.arange(self.block_size, device=self.ctx_visible.device)
        m = torch.ones(self.block_size, self.block_size, dtype=torch.bool, device=i.device)
        if causal:
            m &= i[None, :] <= i[:, None]
        if window is not None:
            m &= (i[:, None] - i[None, :] < window) & (i[None, :] - i[:, None] < window)
        return m

    def mask(self, window: int | None, causal: bool) -> torch.Tensor:
        """The dense [b, 1, A*B, L + A*B] bool mask of the same attention (the sdpa path)."""
        b, A = self.anchors.shape
        B = self.block_size
        ctx = self.ctx_mask(window).reshape(b, A * B, self.ctx_len)
        own = torch.block_diag(*[self.own_mask(window, causal)] * A)
        return torch.cat([ctx, own.expand(b, A * B, A * B)], dim=-1)[:, None]


def block_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layout: BlockLayout,
                    scaling: float, window: int | None = None, causal: bool = False) -> torch.Tensor:
    """query [b, H, A*B, d]; key, value [b, Hkv, L + A*B, d] (grouped-query heads: query
    head h reads key head h // (H / Hkv)). Returns [b, A*B, H, d], as transformers' sdpa."""
    b, H, Q, d = query.shape
    Hkv, L, B = key.shape[1], layout.ctx_len, layout.block_size
    A, G = Q // B, H // Hkv
    q = query.reshape(b, Hkv, G, A, B, d)
    k_ctx, v_ctx = key[:, :, :L], value[:, :, :L]
    k_own, v_own = key[:, :, L:].reshape(b, Hkv, A, B, d), value[:, :, L:].reshape(b, Hkv, A, B, d)
    s_ctx = torch.einsum("zhgaid,zhld->zhgail", q, k_ctx)
    if window is None:
        s_ctx = s_ctx.masked_fill(~layout.ctx_visible[:, None, None, :, None, :], float("-inf"))
    else:
        s_ctx = s_ctx.masked_fill(~layout.ctx_mask(window)[:, None, None], float("-inf"))
    s_own = torch.einsum("zhgaid,zhajd->zhgaij", q, k_own)
    if causal or window is not None:
        s_own = s_own.masked_fill(~layout.own_mask(window, causal), float("-inf"))
    # Softmax in fp32 at least (bf16 under autocast); every row sees at least its own slot.
    scores = torch.cat([s_ctx, s_own], -1)
    p = torch.softmax(scores.to(torch.promote_types(scores.dtype, torch.float32)) * scaling, -1).to(value.dtype)
    out = (torch.einsum("zhgail,zhld->zhgaid", p[..., :L], v_ctx)
           + torch.einsum("zhgaij,zhajd->zhgaid", p[..., L:], v_own))
    return out.reshape(b, H, Q, d).transpose(1, 2).contiguous()


@contextmanager
def routed():
    """Route z-lab's attention calls that carry `block_layout=` to `block_attention`."""
    from dflash.model import ALL_ATTENTION_FUNCTIONS as registry

    original = registry["sdpa"]

    def dispatch(module, query, key, value, attention_mask, *args, block_layout=None, **kwargs):
        if block_layout is None:
            return original(module, query, key, value, attention_mask, *args, **kwargs)
        # z-lab's layers say their own kind: a sliding layer has a window and is causal
        window, causal = getattr(module, "sliding_window", None), bool(getattr(module, "is_causal", False))
        if block_layout.dense:
            kwargs.pop("sliding_window", None)  # in the mask already
            return original(module, query, key, value, block_layout.mask(window, causal), *args, **kwargs)
        return block_attention(query, key, value, block_layout, kwargs.get("scaling") or module.scaling,
                               window, causal), None

    had_local = "sdpa" in registry._local_mapping
    registry["sdpa"] = dispatch
    try:
        yield
    finally:
        if had_local:
            registry["sdpa"] = original
        else:
            del registry["sdpa"]
