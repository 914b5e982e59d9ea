"""Tree speculative decoding: the tree is the best paths, the mask is ancestors-only, and
greedy output equals plain greedy decoding whatever path is accepted."""

import itertools

import pytest
import torch

from draftline.decode import chain as S
from draftline.decode import tree as TS


def _paths(tree: TS.Tree) -> list[tuple[int, ...]]:
    out = []
    for i in range(len(tree)):
        path, cur = [], i
        while cur >= 0:
            path.append(tree.tokens[cur])
            cur = tree.parents[cur]
        out.append(tuple(reversed(path)))
    return out


@pytest.mark.parametrize("budget", [1, 3, 10, 40, 155])
def test_build_tree_keeps_the_best_paths(budget):
    torch.manual_seed(budget)
    logp = torch.log_softmax(torch.randn(3, 5) * 2, dim=-1)
    tree = TS.build_tree(logp, budget)
    every = {p: sum(float(logp[d, t]) for d, t in enumerate(p))
             for n in (1, 2, 3) for p in itertools.product(range(5), repeat=n)}
    best = sorted(every, key=every.get, reverse=True)[:budget]
    got = _paths(tree)
    assert len(got) == len(set(got)) == min(budget, len(every))
    assert set(got) == set(best)
    assert all(p[:-1] in set(got) for p in got if len(p) > 1)  # prefix-closed: a tree
    assert [len(p) for p in got] == tree.depths
    assert all(tree.parents[i] < i for i in range(len(tree)))  # parents come first
    assert got[0] == (int(logp[0].argmax()),)


def test_build_tree_top_k_limits_branching():
    logp = torch.log_softmax(torch.tensor([[3.0, 2.9, 2.8, 2.7], [1.0, 0.5, 0.0, -0.5]]), dim=-1)
    tree = TS.build_tree(logp, 6, top_k=2)
    assert all(p[0] in (0, 1) and (len(p) < 2 or p[1] in (0, 1)) for p in _paths(tree))


def test_tree_mask_sees_cache_root_and_ancestors_only():
    # root -> a(0) -> c(2); root -> b(1)
    tree = TS.Tree(tokens=[7, 8, 9], parents=[-1, -1, 0], depths=[1, 1, 2])
    m = TS.tree_mask(tree, past=2, dtype=torch.float32, device="cpu")[0, 0] == 0
    expected = torch.tensor([
        # c0 c1 root a  b  c
        [1, 1, 1, 0, 0, 0],  # root
        [1, 1, 1, 1, 0, 0],  # a
        [1, 1, 1, 0, 1, 0],  # b
        [1, 1, 1, 1, 0, 1],  # c
    ], dtype=torch.bool)
    assert torch.equal(m, expected)


def test_walk_follows_the_targets_choices():
    tree = TS.Tree(tokens=[7, 8, 9, 4], parents=[-1, -1, 1, 2], depths=[1, 1, 2, 3])
    # choice[0] after the root, choice[i + 1] after node i
    assert TS.walk(tree, [8, 0, 9, 4, 5]) == [1, 2, 3]
    assert TS.walk(tree, [8, 0, 9, 1, 5]) == [1, 2]
    assert TS.walk(tree, [3, 0, 0, 0, 0]) == []


def test_greedy_tree_equals_plain_greedy(tiny):
    target, drafter = tiny
    off_chain = deep = 0
    for prompt in ([1, 2, 3], [4, 0, 1, 1, 2], [3, 3]):
        ids = torch.tensor([prompt])
        plain = S.plain(target, ids, 16, [])
        for budget in (1, 3, 8):
            out = TS.tree_speculative(drafter, target, ids, 16, [], budget=budget)
            assert out.tokens == plain.tokens, (prompt, budget)
            assert sum(out.acceptance_lengths) == len(out.tokens) - 1
            assert max(out.nodes_verified) <= budget
            off_chain += out.off_chain_steps
            deep += sum(n >= 3 for n in out.acceptance_lengths)
    # the cases that need the cache compaction right: paths off the argmax chain, and deep
    assert off_chain > 0 and deep > 0


def test_tree_of_one_path_is_the_chain(tiny):
    """Budget B-1 with top_k 1 keeps exactly the argmax chain: same acceptance as the chain decoder."""
    target, drafter = tiny
    ids = torch.tensor([[2, 4, 1]])
    chain = S.speculative(drafter, target, ids, 16, [])
    tree = TS.tree_speculative(drafter, target, ids, 16, [], budget=drafter.block_size - 1, top_k=1)
    assert tree.tokens == chain.tokens
    assert tree.acceptance_lengths == chain.acceptance_lengths
    assert tree.off_chain_steps == 0


def test_stop_token_cuts_the_output(tiny):
    target, drafter = tiny
    ids = torch.tensor([[1, 2, 3]])
    plain = S.plain(target, ids, 16, [])
    stop = plain.tokens[5]
    want = S.plain(target, ids, 16, [stop])
    got = TS.tree_speculative(drafter, target, ids, 16, [stop], budget=8)
    assert got.tokens == want.tokens and got.tokens[-1] == stop
