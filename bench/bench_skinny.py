"""Decoding's few-row products: torch's `linear` against `draftline.decode.skinny`.

1. The product alone, with the cache flushed between calls (a 64 MB buffer is written) so
   the weights come from memory as they do in decoding; median of 40 calls each:
   - the target's LM head (V x H) on 1-4 rows, as a 2-D input, as the strided 3-D slice
     the drafter's block gives (`h[:, 1:, :]`), and through `head_logits`;
   - the target's 30 decoder layers' seven projections on 1-4 rows, `linear` against
     `skinny_product`.
2. Decoding: the benchmark stage's first requests (4 per source, first turns, the params'
   token count), plain greedy decoding and the chain with the trained and an untrained
   drafter, in three variants alternating per request in one process: every product
   through `linear`; only the LM head through `head_logits`; every linear layer as well
   (`skinny_linears`, what the benchmark stage runs). Reports ms per verify step (per
   token for plain), tokens/s and outputs differing from the first variant's plain greedy.

    .venv/bin/python bench/bench_skinny.py     # needs `make all` first (the target, the drafter, the mix)
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch
import torch.nn.functional as F
from _setup import eval_prompts, load_drafter, load_info, load_params, load_target, load_tokenizer

from draftline.decode import chain, skinny, verify
from draftline.decode.requests import build_requests
from draftline.drafter.model import build_drafter

CALLS = 40
VARIANTS = ("linear", "head", "all")


def linear_logits(weight, rows):
    return F.linear(rows, weight)


class LinearHead:
    def __init__(self, head):
        self.weight = head.weight

    def __call__(self, rows):
        return F.linear(rows, self.weight)


def use(variant: str, models) -> contextlib.AbstractContextManager:
    """Point the decoders at one variant; the returned context routes the linear layers.
    The target's passes take `head_logits` in decode/verify.py, the chain's drafter head
    `SkinnyHead` in decode/chain.py: each is patched where it is used."""
    if variant == "linear":
        verify.head_logits, chain.SkinnyHead = linear_logits, LinearHead
    else:
        verify.head_logits, chain.SkinnyHead = skinny.head_logits, skinny.SkinnyHead
    return skinny.skinny_linears(*models) if variant == "all" else contextlib.nullcontext()


def median_ms(f) -> float:
    junk = torch.zeros(16 * 1024 * 1024)
    ts = []
    for _ in range(CALLS):
        junk.add_(1.0)
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1000


def products(target) -> None:
    weight = target.get_output_embeddings().weight.detach()
    H = weight.shape[1]
    for n in (1, 2, 3, 4):
        x = torch.randn(n, H)
        x3 = torch.randn(1, n + 1, H)[:, 1:, :]
        a, b = median_ms(lambda: F.linear(x, weight)), median_ms(lambda: F.linear(x3, weight))
        c = median_ms(lambda: skinny.head_logits(weight, x3))
        print(f"head {tuple(weight.shape)}, {n} row(s): linear 2-D {a:.2f} ms, linear 3-D slice {b:.2f} ms, "
              f"head_logits {c:.2f} ms")
    layers = [m.weight.detach() for m in target.model.layers.modules() if isinstance(m, torch.nn.Linear)]
    for n in (1, 2, 3, 4):
        xs = {w.shape[1]: torch.randn(n, w.shape[1]) for w in layers}
        a = median_ms(lambda: [F.linear(xs[w.shape[1]], w) for w in layers])
        b = median_ms(lambda: [skinny.skinny_product(xs[w.shape[1]], w) for w in layers])
        print(f"{len(layers)} decoder-layer projections, {n} row(s): linear {a:.2f} ms, skinny_product {b:.2f} ms, "
              f"{a / b:.2f}x")


def main() -> None:
    params = load_params()
    bp = params.benchmark
    info = load_info()
    target = load_target(info.dtype)
    tok = load_tokenizer()
    products(target)
    drafter = load_drafter()
    drafters = {"dflash": drafter, "untrained": build_drafter(drafter.config, bp.seed).eval()}
    models = (target, *drafters.values())
    reqs = build_requests(target, tok, eval_prompts(),
                          bp.model_copy(update={"prompts_per_source": 4, "max_turns": 1}), info.eos_token_ids)
    stop, n_new = info.eos_token_ids, bp.max_new_tokens
    stats = {(v, m): [0.0, 0, 0, 0] for v in VARIANTS for m in ("plain", *drafters)}
    for v in VARIANTS:  # warm-up
        with use(v, models):
            chain.plain(target, reqs[0].input_ids, 8, stop)
            chain.speculative(drafter, target, reqs[0].input_ids, 8, stop)
    for r in reqs:
        ref = None
        for v in VARIANTS:
            with use(v, models):
                out = chain.plain(target, r.input_ids, n_new, stop)
                ref = ref or out.tokens
                s = stats[(v, "plain")]
                s[0] += out.decode_seconds
                s[1] += len(out.tokens) - 1
                s[2] += len(out.tokens) - 1
                s[3] += out.tokens != ref
                for m, d in drafters.items():
                    out = chain.speculative(d, target, r.input_ids, n_new, stop, drafter.block_size)
                    s = stats[(v, m)]
                    s[0] += out.decode_seconds
                    s[1] += len(out.acceptance_lengths)
                    s[2] += len(out.tokens) - 1
                    s[3] += out.tokens != ref
    use("all", ())
    print(f"{len(reqs)} requests, {n_new} new tokens, target {info.dtype}, threads {torch.get_num_threads()}")
    for m in ("plain", *drafters):
        row = []
        for v in VARIANTS:
            t, n, k, x = stats[(v, m)]
            row.append(f"{v} {t / n * 1000:.1f} ms/step ({k / t:.1f} tokens/s, {x} differing)")
        base, new = stats[("linear", m)], stats[("all", m)]
        mid = stats[("head", m)]
        print(f"{m}: " + ", ".join(row) + f"; all vs linear {(base[0] / base[2]) / (new[0] / new[2]):.2f}x, "
              f"all vs head {(mid[0] / mid[2]) / (new[0] / new[2]):.2f}x")


if __name__ == "__main__":
    main()
