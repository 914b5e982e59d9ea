"""Benchmark a drafter against the target alone and against baselines, per benchmark.

Requests: the first `prompts_per_source` prompts of every eval source, each user turn of
a multi-turn prompt (MT-Bench has two) a request of its own; a later turn follows the
target's own greedy answer to the earlier ones. Methods, all on the same requests and in
the same process: the target alone, the trained drafter, the baselines (an untrained
drafter of the same architecture, transformers' n-gram prompt lookup) and, greedy only,
draft trees from the trained drafter's pass (`tree_<budget>`). At temperature 0 every
method's output must equal the target's greedy output token for token.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from .config import BenchmarkParams
from .progress import bar
from .heldout import eval_order
from .skinny import skinny_linears
from .speculative import Decoded, histogram, plain, position_acceptance, prompt_lookup, speculative, tau
from .tree_speculative import tree_speculative


class BenchmarkFailure(RuntimeError):
    pass


@dataclass
class Request:
    source: str
    id: str
    turn: int
    messages: list[dict]
    input_ids: torch.Tensor = field(repr=False, default=None)
    # The target's greedy answer, when it was decoded to build the next turn: the
    # benchmark's target-alone run of this request reuses it instead of decoding it again.
    answer: Decoded | None = field(repr=False, default=None)


def select_prompts(prompts: list[dict], per_source: int) -> list[dict]:
    by_src: dict[str, list[dict]] = {}
    for p in prompts:
        by_src.setdefault(p["source"], []).append(p)
    out = []
    for src in sorted(by_src):
        out.extend(sorted(by_src[src], key=eval_order)[:per_source])
    return out


def first_turn(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        out.append(m)
        if m["role"] == "user":
            break
    return out


def encode_prompt(tok, messages: list[dict]) -> torch.Tensor:
    enc = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                  return_tensors="pt")
    return enc["input_ids"]


def user_turns(messages: list[dict]) -> list[list[dict]]:
    """Conversation prefixes ending at each user turn (given assistant turns dropped)."""
    system = [m for m in messages if m["role"] == "system"]
    users = [m for m in messages if m["role"] == "user"]
    return [system + users[: i + 1] for i in range(len(users))]


def build_requests(target, tok, prompts: list[dict], bp: BenchmarkParams, stop_ids: list[int]) -> list[Request]:
    """Every turn of every chosen prompt; turn n's history holds the target's greedy answers."""
    out = []
    warm = False
    for p in select_prompts(prompts, bp.prompts_per_source):
        history: list[dict] = []
        turns = user_turns(p["messages"])[: bp.max_turns]
        for t, prefix in enumerate(turns):
            msgs = history + [prefix[-1]] if t else prefix
            ids = encode_prompt(tok, msgs).to(target.device)
            req = Request(p["source"], p["id"], t + 1, msgs, ids)
            out.append(req)
            if t + 1 < len(turns):
                if not warm:  # the answer's timing is reported: keep cold kernels out of it
                    plain(target, ids, 8, stop_ids)
                    warm = True
                req.answer = plain(target, ids, bp.max_new_tokens, stop_ids)
                history = msgs + [{"role": "assistant",
                                   "content": tok.decode(req.answer.tokens, skip_special_tokens=True)}]
    return out


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


def _summary(decs: list[Decoded], plain_decs: list[Decoded], block_size: int, with_steps: bool) -> dict:
    tpot = [d.decode_seconds / len(d.tokens) for d in decs if len(d.tokens) > 1]
    base = [d.decode_seconds / len(d.tokens) for d in plain_decs if len(d.tokens) > 1]
    acc = [d.acceptance_lengths for d in decs]
    out = {"tau": tau(acc), "tokens_per_second": 1 / statistics.mean(tpot) if tpot else None,
           "speedup": statistics.mean(base) / statistics.mean(tpot) if tpot and base else None}
    if with_steps:
        out["histogram"] = histogram(acc, block_size)
        out["position_acceptance"] = position_acceptance(acc, block_size)
    nodes = [n for d in decs for n in getattr(d, "nodes_verified", [])]
    if nodes:  # a tree: its verify width, and how often it won a path the chain lacked
        out["nodes_per_step"] = statistics.mean(nodes)
        out["off_chain_steps"] = sum(d.off_chain_steps for d in decs) / len(nodes)
    return out


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
                  block_size: int):
    """drafters: {"dflash": trained, "untrained": ...}, on the target's device. Returns
    (metrics, rows). On a CPU every method, the target alone included, runs its linear
    layers through `skinny_product`, so the speedups compare like with like; on a GPU every
    method runs them as they are."""
    if target.device.type != "cpu":
        return _measure(target, tok, drafters, prompts, bp, stop_ids, block_size)
    with skinny_linears(target, *drafters.values()):
        return _measure(target, tok, drafters, prompts, bp, stop_ids, block_size)


def _measure(target, tok, drafters: dict, prompts: list[dict], bp: BenchmarkParams, stop_ids: list[int],
             block_size: int):
    requests = build_requests(target, tok, prompts, bp, stop_ids)
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
            results.setdefault((T, m), []).append((req, d))
            row = {"source": req.source, "id": req.id, "turn": req.turn, "temperature": T, "method": m,
                   "prompt_tokens": int(req.input_ids.shape[1]), "tokens": len(d.tokens),
                   "steps": len(d.acceptance_lengths), "seconds": d.decode_seconds,
                   "acceptance": [float(a) for a in d.acceptance_lengths]}
            if T == 0 and m == "target":
                reference = d.tokens
                row["text"] = tok.decode(d.tokens, skip_special_tokens=True)
            elif T == 0:
                row["equal_to_target"] = d.tokens == reference
                mismatches += d.tokens != reference
            rows.append(row)
            pb.update(1)
        so_far = results.get((bp.temperatures[0], "dflash"), [])
        pb.set_postfix(tau=f"{tau([d.acceptance_lengths for _, d in so_far]):.2f}")
    pb.close()
    groups = report_groups(requests)
    metrics: dict = {"requests": len(requests), "prompts": len({(r.source, r.id) for r in requests}),
                     "block_size": block_size, "max_new_tokens": bp.max_new_tokens, "mismatches": mismatches}
    for T in bp.temperatures:
        key = "greedy" if T == 0 else f"temperature_{T:g}"
        section = {}
        for src, member in groups.items():
            pick = lambda m: [d for r, d in results.get((T, m), []) if member(r)]  # noqa: E731
            base = pick("target")
            entry = {"requests": len(base),
                     "target_tokens_per_second": _summary(base, base, block_size, False)["tokens_per_second"]}
            for m in methods[1:]:
                if (T, m) in results:
                    entry[m] = _summary(pick(m), base, block_size, m != "prompt_lookup")
            section[src] = entry
        metrics[key] = section
    head = metrics["greedy" if 0.0 in bp.temperatures else key]["all"]["dflash"]
    metrics["tau"] = head["tau"]
    metrics["speedup"] = head["speedup"]
    for m in trees:
        metrics[f"tau_{m}"] = metrics["greedy"]["all"][m]["tau"]
    return metrics, rows
