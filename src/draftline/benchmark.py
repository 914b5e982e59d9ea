"""Benchmark a drafter: tau, acceptance histogram and speedup over plain greedy decoding.

Every speculative output is compared token for token with the target's plain greedy output;
greedy speculative decoding is lossless, so any difference is a bug and fails the stage.
"""

from __future__ import annotations

import statistics

import torch

from .config import BenchmarkParams
from .progress import bar
from .speculative import greedy, histogram, speculative, tau


class BenchmarkFailure(RuntimeError):
    pass


def select_prompts(prompts: list[dict], per_source: int) -> list[dict]:
    by_src: dict[str, list[dict]] = {}
    for p in prompts:
        by_src.setdefault(p["source"], []).append(p)
    out = []
    for src in sorted(by_src):
        rows = sorted(by_src[src], key=lambda r: (len(r["id"]), r["id"]))[:per_source]
        out.extend(rows)
    return out


def first_turn(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        out.append(m)
        if m["role"] == "user":
            break
    return out


def encode_prompt(tok, messages: list[dict]) -> torch.Tensor:
    enc = tok.apply_chat_template(first_turn(messages), add_generation_prompt=True, tokenize=True,
                                  return_dict=True, return_tensors="pt")
    return enc["input_ids"]


def run_benchmark(target, tok, drafter, untrained, prompts, bp: BenchmarkParams, stop_ids: list[int]):
    chosen = select_prompts(prompts, bp.prompts_per_source)
    if not chosen:
        raise BenchmarkFailure("benchmark: no eval prompts (check the eval sources in download.sources)")
    drafters = {"trained": drafter} | ({"untrained": untrained} if untrained is not None else {})
    # Warm up kernels and allocator once so the first request's timing is not an outlier.
    warm = encode_prompt(tok, chosen[0]["messages"])
    greedy(target, warm, 8, stop_ids)
    speculative(drafter, target, warm, 8, stop_ids)
    rows, mismatches = [], 0
    accept = {name: [] for name in drafters}
    by_source: dict[str, dict[str, list]] = {}
    tpot_plain, tpot_spec = [], []
    pb = bar(len(chosen), "benchmark", unit="prompt")
    for p in chosen:
        ids = encode_prompt(tok, p["messages"])
        plain = greedy(target, ids, bp.max_new_tokens, stop_ids)
        row = {"id": p["id"], "source": p["source"], "prompt_tokens": int(ids.shape[1]),
               "plain_tokens": len(plain.tokens), "plain_seconds": plain.decode_seconds}
        for name, d in drafters.items():
            spec = speculative(d, target, ids, bp.max_new_tokens, stop_ids)
            same = spec.tokens == plain.tokens
            if not same:
                mismatches += 1
                first = next((i for i, (a, b) in enumerate(zip(spec.tokens, plain.tokens)) if a != b),
                             min(len(spec.tokens), len(plain.tokens)))
                row[f"{name}_first_mismatch"] = first
            row[f"{name}_equal"] = same
            row[f"{name}_acceptance"] = spec.acceptance_lengths
            row[f"{name}_seconds"] = spec.decode_seconds
            accept[name].append(spec.acceptance_lengths)
            by_source.setdefault(p["source"], {}).setdefault(name, []).append(spec.acceptance_lengths)
            if name == "trained" and len(plain.tokens) > 1:
                tpot_plain.append(plain.decode_seconds / len(plain.tokens))
                tpot_spec.append(spec.decode_seconds / len(spec.tokens))
        row["text"] = tok.decode(plain.tokens, skip_special_tokens=True)
        rows.append(row)
        pb.update(1)
        pb.set_postfix(tau=f"{tau(accept['trained']):.2f}")
    pb.close()
    B = drafter.block_size
    metrics = {
        "prompts": len(chosen), "block_size": B, "max_new_tokens": bp.max_new_tokens,
        "tau": tau(accept["trained"]),
        "tau_by_source": {s: tau(v["trained"]) for s, v in sorted(by_source.items())},
        "histogram": histogram(accept["trained"], B),
        "plain_tokens_per_second": 1 / statistics.mean(tpot_plain) if tpot_plain else None,
        "spec_tokens_per_second": 1 / statistics.mean(tpot_spec) if tpot_spec else None,
        "speedup": statistics.mean(tpot_plain) / statistics.mean(tpot_spec) if tpot_spec else None,
        "mismatches": mismatches,
    }
    if "untrained" in accept:
        metrics["tau_untrained"] = tau(accept["untrained"])
    hist = {name: histogram(a, B) for name, a in accept.items()}
    return metrics, rows, hist
