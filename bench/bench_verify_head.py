"""Greedy verification with the LM head on every verify row vs only on the rows the
acceptance walk reads (`draftline.decode.verify.LazyArgmax`), same process, alternating per
request, on the benchmark stage's requests: the drafter's chain, the untrained drafter
(every draft rejected: one row read per step) and a 32-node tree. Outputs must be equal.

    .venv/bin/python bench/bench_verify_head.py --prompts-per-source 4    # after `make all`
"""

from __future__ import annotations

import argparse
import warnings

import torch

warnings.simplefilter("ignore", FutureWarning)

from _setup import eval_prompts, load_drafter, load_info, load_params, load_target, load_tokenizer  # noqa: E402

# The chain and the tree call `verify_greedy` by the name each imported from decode/verify.py:
# a variant is patched into both modules.
from draftline.decode import chain  # noqa: E402
from draftline.decode import tree as tree_spec  # noqa: E402
from draftline.decode.requests import build_requests  # noqa: E402
from draftline.decode.verify import verify_greedy  # noqa: E402
from draftline.drafter.model import build_drafter  # noqa: E402

LAZY = verify_greedy


def every_row(target, ids, **kw):
    """The baseline: the full causal LM, logits (and argmax) at every verify row."""
    out = target(ids, use_cache=True, **kw)
    return out.logits[0].argmax(-1).tolist(), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts-per-source", type=int, default=4)
    args = ap.parse_args()
    bp = load_params().benchmark.model_copy(update={"prompts_per_source": args.prompts_per_source})
    info = load_info()
    target = load_target(info.dtype)
    tok = load_tokenizer()
    drafter = load_drafter()
    untrained = build_drafter(drafter.config, 0).eval()
    stop = info.eos_token_ids
    requests = build_requests(target, tok, eval_prompts(), bp, stop)
    n = bp.max_new_tokens
    methods = {"chain": lambda ids: chain.speculative(drafter, target, ids, n, stop),
               "untrained": lambda ids: chain.speculative(untrained, target, ids, n, stop),
               "tree32": lambda ids: tree_spec.tree_speculative(drafter, target, ids, n, stop, budget=32)}
    variants = {"every row": every_row, "rows read": LAZY}
    times = {(m, v): [] for m in methods for v in variants}
    steps = {m: 0 for m in methods}
    differ = 0
    with torch.inference_mode():
        for fn in methods.values():  # warm-up
            fn(requests[0].input_ids[:, :32])
        for req in requests:
            for m, fn in methods.items():
                outs = []
                for v, verify in variants.items():
                    chain.verify_greedy = tree_spec.verify_greedy = verify
                    d = fn(req.input_ids)
                    times[(m, v)].append(d.decode_seconds)
                    outs.append(d.tokens)
                steps[m] += len(d.acceptance_lengths)
                differ += outs[0] != outs[1]
    chain.verify_greedy = tree_spec.verify_greedy = LAZY
    print(f"{len(requests)} requests x {n} new tokens, greedy; outputs differing between variants: {differ}")
    for m in methods:
        base = sum(times[(m, "every row")])
        for v in variants:
            t = sum(times[(m, v)])
            print(f"{m:9s} {v:9s} {1000 * t / steps[m]:6.1f} ms/step  {base / t:.3f}x")


if __name__ == "__main__":
    main()
