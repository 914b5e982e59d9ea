"""Greedy speculative decoding with a draft tree from one DFlash drafter pass.

A DFlash drafter predicts every position of its block in one pass, all from the same
context, so it gives a distribution q_k per position k = 1..B-1 rather than a single chain.
The chain decoder keeps only argmax(q_k). Here we keep the `budget` likeliest
continuations under q_1(x_1) * ... * q_k(x_k): since extending a path never raises its
score, the best `budget` paths form a tree (every prefix of a kept path is kept). The
target scores all of them in one forward pass, each node seeing the cache and its own
ancestors only (a tree attention mask; DDTree, arXiv 2604.12989). The longest path whose
every token equals the target's argmax after its parent is accepted, the target's argmax
after it is the bonus token, and the cache keeps only that path: the output is the
target's greedy output token for token, as with the chain.

Accounting is the chain's (`chain.py`): one acceptance length (`accepted + 1`) per
target forward after the prefill, so tau compares directly. A tree costs a wider verify
pass, which is nearly free on a GPU and not on a CPU: bench/bench_tree.py measures both.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from ..hidden.capture import LayerOutputs
from .recurrent import Snapshot, expand, has_recurrent, select
from .skinny import SkinnyHead, head_logits
from .verify import Decoded, keep_cache, new_cache, replay, stop_cut, target_step, verify_greedy


@dataclass(frozen=True)
class Tree:
    tokens: list[int]  # node i's token
    parents: list[int]  # node i's parent node, -1 for the root (the block's anchor)
    depths: list[int]  # 1 for the root's children, ...

    def __len__(self) -> int:
        return len(self.tokens)


def build_tree(logp: torch.Tensor, budget: int, top_k: int | None = None) -> Tree:
    """The `budget` paths of highest summed log-probability, depth 1..len(logp).

    logp [D, V]: the drafter's log-probabilities per block position. Best-first search over
    (parent, depth, rank) where rank indexes the position's tokens sorted by probability: a
    popped node offers its best child and its next sibling, whose scores are never higher,
    so nodes come out in score order (ties: the one found first)."""
    depth_max = logp.shape[0]
    k = min(top_k or budget, logp.shape[1], budget)
    vals, ids = logp.float().topk(k, dim=-1)
    vals, ids = vals.tolist(), ids.tolist()
    tokens: list[int] = []
    parents: list[int] = []
    depths: list[int] = []
    # (-score, order, parent node, depth (0-based position), rank, parent score)
    order = 0
    heap = [(-vals[0][0], order, -1, 0, 0, 0.0)]
    while heap and len(tokens) < budget:
        neg, _, parent, d, r, base = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(ids[d][r])
        parents.append(parent)
        depths.append(d + 1)
        if r + 1 < k:  # next sibling: same parent, next token at this position
            order += 1
            heapq.heappush(heap, (-(base + vals[d][r + 1]), order, parent, d, r + 1, base))
        if d + 1 < depth_max:  # best child
            order += 1
            heapq.heappush(heap, (neg - vals[d + 1][0], order, node, d + 1, 0, -neg))
    return Tree(tokens, parents, depths)


def tree_mask(tree: Tree, past: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive [1, 1, n+1, past+n+1] mask for [root, nodes...]: every row sees the cache,
    the root, itself and its ancestors."""
    n = len(tree)
    see = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    see[:, 0] = True
    see[0, 0] = True
    for i, p in enumerate(tree.parents):
        row = i + 1
        see[row, row] = True
        if p >= 0:
            see[row] |= see[p + 1]
    full = torch.cat([torch.ones(n + 1, past, dtype=torch.bool), see], dim=1)
    mask = torch.zeros(full.shape, dtype=dtype)
    mask.masked_fill_(~full, torch.finfo(dtype).min)
    return mask[None, None].to(device)


def walk(tree: Tree, choice: list[int]) -> list[int]:
    """Nodes of the accepted path: from the root, follow the child whose token is the
    target's argmax after the current node (choice[0] after the root, choice[i+1] after node i)."""
    children: dict[int, dict[int, int]] = {}
    for i, (t, p) in enumerate(zip(tree.tokens, tree.parents)):
        children.setdefault(p, {}).setdefault(t, i)
    path: list[int] = []
    cur = -1
    while True:
        nxt = children.get(cur, {}).get(choice[cur + 1])
        if nxt is None:
            return path
        path.append(nxt)
        cur = nxt


def keep_positions(cache: DynamicCache, index: torch.Tensor) -> None:
    """Keep only the cached positions in `index` (sorted), in every layer."""
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        k = layer.keys.index_select(-2, index)
        v = layer.values.index_select(-2, index)
        layer.keys, layer.values = k, v


def leaf_paths(tree: Tree) -> list[list[int]]:
    """Every root-to-leaf path of the tree, as node lists (one empty path for an empty tree)."""
    has_child = set(tree.parents)
    paths = []
    for i in range(len(tree)):
        if i in has_child:
            continue
        path, cur = [], i
        while cur >= 0:
            path.append(cur)
            cur = tree.parents[cur]
        paths.append(path[::-1])
    return paths or [[]]


class _Row(Snapshot):
    """The snapshot taken before a batched tree verify, with the batch row that was accepted."""

    index = 0


def _verify_paths(target, cache, tree: Tree, root: int, start: int):
    """A tree through a hybrid target: linear-attention layers read their input in order and
    cannot follow a tree mask, so each root-to-leaf path is a row of one batched pass over
    copies of the cache (shorter rows padded at the end, which no earlier position sees).
    Returns the accepted path, the bonus token and the snapshot (with the accepted row) to
    rebuild the one-row cache from."""
    paths = leaf_paths(tree)
    width = 1 + max(len(p) for p in paths)
    ids = [[root, *(tree.tokens[n] for n in p)] + [root] * (width - 1 - len(p)) for p in paths]
    where = {-1: (0, 0)}
    for r, p in enumerate(paths):
        for d, n in enumerate(p, start=1):
            where.setdefault(n, (r, d))
    snapshot = _Row(cache)
    expand(cache, len(paths))
    dev = target.device
    out = target.base_model(torch.tensor(ids, device=dev), cache=cache, use_cache=True,
                            position_ids=torch.arange(start, start + width, device=dev)[None].expand(len(paths), -1))
    weight = target.get_output_embeddings().weight
    children: dict[int, dict[int, int]] = {}
    for i, (t, p) in enumerate(zip(tree.tokens, tree.parents)):
        children.setdefault(p, {}).setdefault(t, i)
    path, cur = [], -1
    while True:
        r, d = where[cur]
        choice = int(head_logits(weight, out.last_hidden_state[r, d : d + 1]).argmax(-1))
        nxt = children.get(cur, {}).get(choice)
        if nxt is None:
            break
        path.append(nxt)
        cur = nxt
    snapshot.index = where[cur][0]
    select(cache, snapshot.index)
    return path, choice, snapshot


@dataclass
class TreeDecoded(Decoded):
    nodes_verified: list[int]  # tree size per verify step (root excluded)
    off_chain_steps: int  # steps whose accepted path left the drafter's argmax chain


@torch.inference_mode()
def tree_speculative(drafter, target, input_ids: torch.Tensor, max_new_tokens: int, stop_ids: list[int],
                     budget: int, block_size: int | None = None, top_k: int | None = None) -> TreeDecoded:
    with LayerOutputs(target, drafter.target_layer_ids) as states:  # the drafter's layers only
        return _tree_speculative(drafter, target, states, input_ids, max_new_tokens, stop_ids, budget, block_size,
                                 top_k)


def _tree_speculative(drafter, target, states: LayerOutputs, input_ids: torch.Tensor, max_new_tokens: int,
                      stop_ids: list[int], budget: int, block_size: int | None, top_k: int | None) -> TreeDecoded:
    B, n_in, dev = block_size or drafter.block_size, input_ids.shape[1], input_ids.device
    mask_id = int(drafter.mask_token_id)
    embed_w, head = target.get_input_embeddings().weight, SkinnyHead(target.get_output_embeddings())
    stop, max_len = set(stop_ids), n_in + max_new_tokens
    dtype = next(target.parameters()).dtype
    cache = new_cache(target.config)
    d_cache = new_cache(drafter.config)
    logits, _ = target_step(target, input_ids, cache=cache)
    recurrent = has_recurrent(cache)
    seq = input_ids[0].tolist() + [int(logits[-1].argmax())]
    ctx = states.features()
    t0 = time.perf_counter()
    start = n_in
    lengths: list[int] = []
    sizes: list[int] = []
    off_chain = 0
    stopped = seq[start] in stop
    while start + 1 < max_len and not stopped:
        depth = min(B, max_len - start) - 1  # positions that can still be drafted
        tree = Tree([], [], [])
        if depth > 0:
            block = [seq[start]] + [mask_id] * depth
            noise = F.embedding(torch.tensor([block], device=dev), embed_w)
            pos = torch.arange(start - ctx.shape[1], start + depth + 1, device=dev)[None]
            h = drafter(target_hidden=ctx, noise_embedding=noise, position_ids=pos, past_key_values=d_cache,
                        use_cache=True)[:, 1:, :]
            keep_cache(d_cache, start)
            logp = torch.log_softmax(drafter.compute_logits(h[0], head).float(), dim=-1)
            tree = build_tree(logp, budget, top_k)
            argmax = logp.argmax(-1).tolist()
        if recurrent:
            path, bonus, row = _verify_paths(target, cache, tree, seq[start], start)
        else:
            ids = torch.tensor([[seq[start], *tree.tokens]], device=dev)
            positions = torch.tensor([[start, *(start + d for d in tree.depths)]], device=dev)
            choice, _ = verify_greedy(target, ids, position_ids=positions, cache=cache,
                                      attention_mask=tree_mask(tree, start, dtype, dev))
            path = walk(tree, choice)
            bonus = choice[path[-1] + 1 if path else 0]
        block_ctx = states.features()  # the verify pass's, taken before a replay runs the layers again
        if any(tree.tokens[i] != argmax[tree.depths[i] - 1] for i in path):
            off_chain += 1  # a path the chain decoder would have missed
        new = [tree.tokens[i] for i in path] + [bonus]
        produced = min(len(path) + 1, max_len - start - 1)
        cut = stop_cut(new[:produced], stop)
        if cut is not None:
            produced, stopped = cut + 1, True
        seq = seq[: start + 1] + new[:produced]
        if recurrent:
            # the accepted path's row of the batch; its first `produced` positions are the tokens kept
            rows = list(range(produced))
            replay(target, cache, row, seq[start : start + produced], start)
            block_ctx = block_ctx[row.index : row.index + 1]
        else:
            rows = [0, *(i + 1 for i in path)][:produced]  # verify-pass rows now part of the sequence
            keep_positions(cache, torch.cat([torch.arange(start, device=dev),
                                             start + torch.tensor(rows, device=dev)]))
        start += produced
        lengths.append(produced)
        sizes.append(len(tree))
        if depth > 0:
            ctx = block_ctx[:, rows]
    tokens = seq[n_in : min(start + 1, max_len)]
    return TreeDecoded(tokens, lengths, time.perf_counter() - t0, sizes, off_chain)
