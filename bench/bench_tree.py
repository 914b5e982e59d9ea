"""Draft trees vs the draft chain: tau and decoding speed on the benchmark stage's requests.

For every request of the benchmark stage (same prompts, both MT-Bench turns, greedy), in
one process and alternating per request: the target alone, the drafter's chain (what the
benchmark stage and z-lab's `dflash_generate` run), and draft trees of several budgets
from the same drafter pass (`draftline.decode.tree`). Every output must equal the
target's greedy output. Prints tau per benchmark, verified nodes per step, the share of
steps whose accepted path left the argmax chain, and speed relative to the target alone.

    .venv/bin/python bench/bench_tree.py                       # after `make all`
    .venv/bin/python bench/bench_tree.py --budgets 4,8,16 --drafter data/drafter
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings

import torch

warnings.simplefilter("ignore", FutureWarning)

from _setup import eval_prompts, load_drafter, load_info, load_params, load_target, load_tokenizer, path  # noqa: E402

from draftline.decode.acceptance import tau  # noqa: E402
from draftline.decode.chain import plain, speculative  # noqa: E402
from draftline.decode.requests import build_requests  # noqa: E402
from draftline.decode.tree import tree_speculative  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", default=path("drafter"), help="drafter folder (default: paths.drafter in dvc.yaml)")
    ap.add_argument("--budgets", default="4,8,16")
    ap.add_argument("--prompts-per-source", type=int, default=None)
    args = ap.parse_args()
    bp = load_params().benchmark
    if args.prompts_per_source:
        bp = bp.model_copy(update={"prompts_per_source": args.prompts_per_source})
    budgets = [int(b) for b in args.budgets.split(",")]
    info = load_info()
    target = load_target(info.dtype)
    tok = load_tokenizer()
    drafter = load_drafter(args.drafter)
    stop = info.eos_token_ids
    requests = build_requests(target, tok, eval_prompts(), bp, stop)
    methods = {"target": lambda ids: plain(target, ids, bp.max_new_tokens, stop),
               "chain": lambda ids: speculative(drafter, target, ids, bp.max_new_tokens, stop)}
    for b in budgets:
        methods[f"tree{b}"] = lambda ids, b=b: tree_speculative(drafter, target, ids, bp.max_new_tokens, stop,
                                                                budget=b)
    for fn in methods.values():  # warm-up
        fn(requests[0].input_ids[:, :32])
    results: dict[str, list] = {m: [] for m in methods}
    mismatches = 0
    for i, req in enumerate(requests):
        ref = None
        for m, fn in methods.items():
            d = fn(req.input_ids)
            results[m].append((req.source, d))
            if m == "target":
                ref = d.tokens
            else:
                mismatches += d.tokens != ref
        print(f"request {i + 1}/{len(requests)}", file=sys.stderr, flush=True)
    base = {src: statistics.mean(d.decode_seconds / len(d.tokens) for s, d in results["target"]
                                 if src in ("all", s) and len(d.tokens) > 1)
            for src in ["all", *sorted({r.source for r in requests})]}
    print(f"requests {len(requests)}, block size {drafter.block_size}, {bp.max_new_tokens} new tokens, "
          f"greedy; outputs differing from the target's: {mismatches}")
    print("| method | " + " | ".join(f"tau {s}" for s in base) + " | nodes per step | off-chain steps | speedup all |")
    print("| --- " * (len(base) + 4) + "|")
    for m in list(methods)[1:]:
        taus = [tau([d.acceptance_lengths for s, d in results[m] if src in ("all", s)]) for src in base]
        decs = [d for _, d in results[m]]
        nodes = [n for d in decs for n in getattr(d, "nodes_verified", [drafter.block_size - 1] * len(d.acceptance_lengths))]
        steps = sum(len(d.acceptance_lengths) for d in decs)
        off = sum(getattr(d, "off_chain_steps", 0) for d in decs)
        tpot = statistics.mean(d.decode_seconds / len(d.tokens) for d in decs if len(d.tokens) > 1)
        print(f"| {m} | " + " | ".join(f"{t:.3f}" for t in taus)
              + f" | {statistics.mean(nodes):.1f} | {off / steps:.1%} | {base['all'] / tpot:.2f}x |")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
