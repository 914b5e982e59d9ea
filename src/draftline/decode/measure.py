"""Benchmark a drafter against the target alone and against baselines, per benchmark.

Requests: the first `prompts_per_source` prompts of every eval source, each user turn of
a multi-turn prompt (MT-Bench has two) a request of its own; a later turn follows the
target's own greedy answer to the earlier ones. Methods, all on the same requests and in
the same process: the target alone, the trained drafter, the baselines (an untrained
drafter of the same architecture, transformers' n-gram prompt lookup) and, greedy only,
draft trees from the trained drafter's pass (`tree_<budget>`). At temperature 0 every
method's output must equal the target's greedy output token for token.

For a target whose template has a reasoning end marker (reasoning.py), each method with
per-step counts also reports tau on the reasoning and on the answer part of its outputs.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import torch

from ..progress import bar
from .acceptance import histogram, position_acceptance, tau
from .chain import plain, speculative
from .prompt_lookup import prompt_lookup
from .reasoning import ReasoningSplit, reasoning_split, split_steps
from .requests import Request, build_requests
from .skinny import skinny_linears
from .verify import Decoded
from .tree import tree_speculative

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.benchmark import BenchmarkParams


class BenchmarkFailure(RuntimeError):
    pass


def _run(method: str, model, target, req: Request, bp: BenchmarkParams, stop_ids, temperature: float,
         block_size: int, gen: torch.Generator) -> Decoded:
    if method == "target":
        return plain(target, req.input_ids, bp.max_new_tokens, stop_ids, temperature, gen)
    if method == "prompt_lookup":
        return prompt_lookup(target, req.input_ids, bp.max_new_tokens, stop_ids, block_size - 1)
    if method.startswith("tree_"):
        return tree_speculative(model, target, req.input_ids, bp.max_new_tokens, stop_ids,
                                budget=int(method.removeprefix("tree_")), block_size=block_size)
    return speculative(model, target, req.input_ids, bp.max_new_tokens, stop_ids, block_size, temperature, gen)


def _summary(decs: list[Decoded], plain_decs: list[Decoded], block_size: int, with_steps: bool,
             reasoning: list[int] | None = None) -> dict:
    """reasoning: each output's count of reasoning tokens, when the target thinks."""
    tpot = [d.decode_seconds / len(d.tokens) for d in decs if len(d.tokens) > 1]
    base = [d.decode_seconds / len(d.tokens) for d in plain_decs if len(d.tokens) > 1]
    acc = [d.acceptance_lengths for d in decs]
    out = {"tau": tau(acc)}
    # Prompt lookup's steps are an even spread (transformers does not report them): no
    # step starts at a known token, so it has no split.
    if reasoning is not None and with_steps:
        parts = [split_steps(d.acceptance_lengths, n) for d, n in zip(decs, reasoning)]
        out["tau_reasoning"] = _part_tau([r for r, _ in parts])
        out["tau_answer"] = _part_tau([a for _, a in parts])
        out["reasoning_tokens"] = sum(reasoning)
        out["answer_tokens"] = sum(len(d.tokens) for d in decs) - sum(reasoning)
    out["tokens_per_second"] = 1 / statistics.mean(tpot) if tpot else None
    out["speedup"] = statistics.mean(base) / statistics.mean(tpot) if tpot and base else None
    if with_steps:
        out["histogram"] = histogram(acc, block_size)
        out["position_acceptance"] = position_acceptance(acc, block_size)
    nodes = [n for d in decs for n in getattr(d, "nodes_verified", [])]
    if nodes:  # a tree: its verify width, and how often it won a path the chain lacked
        out["nodes_per_step"] = statistics.mean(nodes)
        out["off_chain_steps"] = sum(d.off_chain_steps for d in decs) / len(nodes)
    return out


def _part_tau(per_request: list[list[int]]) -> float | None:
    """tau over the requests with steps in the part; None (JSON null) when none has any,
    e.g. the reasoning part with thinking off."""
    return tau(per_request) if any(per_request) else None


def report_groups(requests: list[Request]) -> dict:
    """Name -> membership test: each benchmark, each turn of a multi-turn one
    (`mtbench_turn2`: later turns restate earlier answers, where a drafter that cannot copy
    from its context loses to prompt lookup), and `all`."""
    groups = {}
    for src in sorted({r.source for r in requests}):
        groups[src] = lambda r, src=src: r.source == src
        turns = sorted({r.turn for r in requests if r.source == src})
        if len(turns) > 1:
            for t in turns:
                groups[f"{src}_turn{t}"] = lambda r, src=src, t=t: r.source == src and r.turn == t
    groups["all"] = lambda r: True
    return groups


def run_benchmark(target, tok, drafters: dict, prompts: list[dict], bp: BenchmarkParams, stop_ids: list[int],
                  block_size: int, template_kwargs: dict | None = None):
    """drafters: {"dflash": trained, "untrained": ...}, on the target's device;
    template_kwargs: `chat.template_kwargs()`. Returns (metrics, rows). On a CPU every
    method, the target alone included, runs its linear layers through `skinny_product`, so
    the speedups compare like with like; on a GPU every method runs them as they are."""
    args = (target, tok, drafters, prompts, bp, stop_ids, block_size, template_kwargs or {})
    if target.device.type != "cpu":
        return _measure(*args)
    with skinny_linears(target, *drafters.values()):
        return _measure(*args)


def _measure(target, tok, drafters: dict, prompts: list[dict], bp: BenchmarkParams, stop_ids: list[int],
             block_size: int, template_kwargs: dict):
    requests = build_requests(target, tok, prompts, bp, stop_ids, template_kwargs)
    split: ReasoningSplit | None = reasoning_split(tok, template_kwargs)
    if not requests:
        raise BenchmarkFailure("benchmark: no eval prompts (check the eval sources in download.sources)")
    methods = ["target", "dflash"] + [b for b in bp.baselines if b == "prompt_lookup" or b in drafters]
    trees = [f"tree_{b}" for b in bp.tree_budgets]
    methods += trees
    # Warm up kernels and allocator once so the first request's timing is not an outlier.
    for m in methods:
        _run(m, drafters.get(m, drafters["dflash"]), target, requests[0], bp.model_copy(update={"max_new_tokens": 8}), stop_ids, 0.0,
             block_size, torch.Generator().manual_seed(0))
    rows, results = [], {}
    mismatches = 0
    # prompt lookup and trees are greedy methods
    runs = [(T, m) for T in bp.temperatures for m in methods if T == 0 or (m != "prompt_lookup" and m not in trees)]
    pb = bar(len(runs) * len(requests), "benchmark", unit="decode")
    for i, req in enumerate(requests):
        reference = None
        for T, m in runs:
            gen = torch.Generator().manual_seed(bp.seed * 1_000_003 + i)  # same seed for every method
            if T == 0 and m == "target" and req.answer is not None:
                d = req.answer
            else:
                d = _run(m, drafters.get(m, drafters["dflash"]), target, req, bp, stop_ids, T, block_size, gen)
            n_reasoning = split.reasoning_tokens(d.tokens) if split else None
            results.setdefault((T, m), []).append((req, d, n_reasoning))
            row = {"source": req.source, "id": req.id, "turn": req.turn, "temperature": T, "method": m,
                   "prompt_tokens": int(req.input_ids.shape[1]), "tokens": len(d.tokens),
                   "steps": len(d.acceptance_lengths), "seconds": d.decode_seconds,
                   "acceptance": [float(a) for a in d.acceptance_lengths]}
            if split:  # with the acceptance lengths, enough to redo the split from the rows
                row["reasoning_tokens"] = n_reasoning
            if T == 0 and m == "target":
                reference = d.tokens
                row["text"] = tok.decode(d.tokens, skip_special_tokens=True)
            elif T == 0:
                row["equal_to_target"] = d.tokens == reference
                mismatches += d.tokens != reference
            rows.append(row)
            pb.update(1)
        so_far = results.get((bp.temperatures[0], "dflash"), [])
        pb.set_postfix(tau=f"{tau([d.acceptance_lengths for _, d, _ in so_far]):.2f}")
    pb.close()
    groups = report_groups(requests)
    metrics: dict = {"requests": len(requests), "prompts": len({(r.source, r.id) for r in requests}),
                     "block_size": block_size, "max_new_tokens": bp.max_new_tokens, "mismatches": mismatches}
    if split:
        metrics["reasoning_end"] = split.end
    for T in bp.temperatures:
        key = "greedy" if T == 0 else f"temperature_{T:g}"
        section = {}
        for src, member in groups.items():
            picked = lambda m: [(d, n) for r, d, n in results.get((T, m), []) if member(r)]  # noqa: E731
            base = [d for d, _ in picked("target")]
            entry = {"requests": len(base),
                     "target_tokens_per_second": _summary(base, base, block_size, False)["tokens_per_second"]}
            for m in methods[1:]:
                if (T, m) in results:
                    decs = picked(m)
                    entry[m] = _summary([d for d, _ in decs], base, block_size, m != "prompt_lookup",
                                        [n for _, n in decs] if split else None)
            section[src] = entry
        metrics[key] = section
    head = metrics["greedy" if 0.0 in bp.temperatures else key]["all"]["dflash"]
    metrics["tau"] = head["tau"]
    metrics["speedup"] = head["speedup"]
    if split:
        metrics["tau_reasoning"] = head["tau_reasoning"]
        metrics["tau_answer"] = head["tau_answer"]
    for m in trees:
        metrics[f"tau_{m}"] = metrics["greedy"]["all"][m]["tau"]
    return metrics, rows
