"""The LM head over a decoding step's few rows: torch's `linear` against `head_logits`.

1. The product alone: the target's head (V x H) on 1-4 rows, as a 2-D input, as the
   strided 3-D slice the drafter's block gives (`h[:, 1:, :]`), and through `head_logits`;
   a 64 MB buffer is written between calls so the head comes from memory, as it does
   after a target pass. Median of 40 calls each.
2. Decoding: the benchmark stage's first requests (4 per source, first turns, the params'
   token count), plain greedy decoding and the chain with the trained and an untrained
   drafter, once with every head product through `linear` (the previous code) and once
   through `head_logits`, alternating per request in one process. Reports ms per verify
   step (per token for plain), tokens/s and outputs differing from plain greedy.

    .venv/bin/python bench/bench_skinny_head.py     # needs `make all` first (data/target, data/drafter, data/mix)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from draftline import skinny_head  # noqa: E402
from draftline import speculative as spec  # noqa: E402
from draftline import target as tgt  # noqa: E402
from draftline.benchmark import build_requests  # noqa: E402
from draftline.config import load_params  # noqa: E402
from draftline.drafter.model import build_drafter, load_drafter  # noqa: E402
from draftline.io import read_parquet  # noqa: E402

CALLS = 40


def linear_logits(weight, rows):
    return F.linear(rows, weight)


class LinearHead:
    def __init__(self, head):
        self.weight = head.weight

    def __call__(self, rows):
        return F.linear(rows, self.weight)


def use(variant: str) -> None:
    """Point the decoders at one head implementation."""
    fn, cls = (skinny_head.head_logits, skinny_head.SkinnyHead) if variant == "head_logits" else (linear_logits, LinearHead)
    spec.head_logits, spec.SkinnyHead = fn, cls


def products(weight: torch.Tensor) -> None:
    junk = torch.zeros(16 * 1024 * 1024)

    def median_ms(f) -> float:
        ts = []
        for _ in range(CALLS):
            junk.add_(1.0)
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1000

    H = weight.shape[1]
    for n in (1, 2, 3, 4):
        x = torch.randn(n, H)
        x3 = torch.randn(1, n + 1, H)[:, 1:, :]
        a, b = median_ms(lambda: F.linear(x, weight)), median_ms(lambda: F.linear(x3, weight))
        c = median_ms(lambda: skinny_head.head_logits(weight, x3))
        print(f"head {tuple(weight.shape)}, {n} row(s): linear 2-D {a:.2f} ms, linear 3-D slice {b:.2f} ms, "
              f"head_logits {c:.2f} ms")


def main() -> None:
    params = load_params(ROOT / "params.yaml")
    bp = params.benchmark
    info = tgt.TargetInfo.load("data/target/info.json")
    target = tgt.load_model("data/target/model", info.dtype)
    tok = tgt.load_tokenizer("data/target/model")
    products(target.get_output_embeddings().weight.detach())
    drafter = load_drafter("data/drafter")
    drafters = {"dflash": drafter, "untrained": build_drafter(drafter.config, bp.seed).eval()}
    reqs = build_requests(target, tok, read_parquet("data/mix/eval.parquet"),
                          bp.model_copy(update={"prompts_per_source": 4, "max_turns": 1}), info.eos_token_ids)
    stop, n_new = info.eos_token_ids, bp.max_new_tokens
    stats = {(v, m): [0.0, 0, 0, 0] for v in ("linear", "head_logits") for m in ("plain", *drafters)}
    for v in ("linear", "head_logits"):  # warm-up
        use(v)
        spec.plain(target, reqs[0].input_ids, 8, stop)
        spec.speculative(drafter, target, reqs[0].input_ids, 8, stop)
    for r in reqs:
        for v in ("linear", "head_logits"):
            use(v)
            ref = spec.plain(target, r.input_ids, n_new, stop)
            s = stats[(v, "plain")]
            s[0] += ref.decode_seconds
            s[1] += len(ref.tokens) - 1
            s[2] += len(ref.tokens) - 1
            for m, d in drafters.items():
                out = spec.speculative(d, target, r.input_ids, n_new, stop, drafter.block_size)
                s = stats[(v, m)]
                s[0] += out.decode_seconds
                s[1] += len(out.acceptance_lengths)
                s[2] += len(out.tokens) - 1
                s[3] += out.tokens != ref.tokens
    use("head_logits")
    print(f"{len(reqs)} requests, {n_new} new tokens, target {info.dtype}, threads {torch.get_num_threads()}")
    for m in ("plain", *drafters):
        (t0, n0, k0, x0), (t1, n1, k1, x1) = stats[("linear", m)], stats[("head_logits", m)]
        print(f"{m}: linear {t0 / n0 * 1000:.1f} ms/step ({k0 / t0:.1f} tokens/s, {x0} differing), "
              f"head_logits {t1 / n1 * 1000:.1f} ms/step ({k1 / t1:.1f} tokens/s, {x1} differing), "
              f"{(t0 / k0) / (t1 / k1):.2f}x")


if __name__ == "__main__":
    main()
