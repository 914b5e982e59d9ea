"""Lossless decoding on the real targets' text layouts: a Gated-DeltaNet hybrid (Qwen3.6-class)
and MLA + MoE (Kimi-class), tiny and random, from transformers' own classes. The chain, the
tree and prompt lookup must give plain greedy's tokens, the hybrid's recurrent state rolled
back after every rejection; an untrained drafter rejects nearly every block, and prompt
lookup on a looping random model accepts whole blocks, so both paths run."""

import pytest
import torch

from draftline.config.drafter import DrafterParams
from draftline.decode.chain import plain, speculative
from draftline.decode.prompt_lookup import candidates, prompt_lookup
from draftline.decode.recurrent import Snapshot, has_recurrent
from draftline.decode.verify import new_cache
from draftline.decode.tree import leaf_paths, Tree, tree_speculative
from draftline.drafter.model import build_drafter, drafter_config


def _hybrid():
    from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_key_heads=2,
                            linear_num_value_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
                            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])
    return Qwen3_5ForCausalLM(cfg)


def _mla():
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    cfg = DeepseekV3Config(vocab_size=96, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                           num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
                           n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=16,
                           kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8, n_group=1,
                           topk_group=1)
    return DeepseekV3ForCausalLM(cfg)


@pytest.fixture(scope="module", params=["hybrid", "mla"])
def pair(request):
    torch.manual_seed(0)
    target = {"hybrid": _hybrid, "mla": _mla}[request.param]().eval()
    with torch.no_grad():
        target.get_input_embeddings().weight.mul_(6)  # sharp argmax: decisions, not rounding, are compared
    dp = DrafterParams(num_layers=2, block_size=4, target_layer_ids=[0, 1],
                       layer_types=["sliding_attention", "full_attention"], sliding_window=6)
    drafter = build_drafter(drafter_config(target.config, dp, [0, 1], 95), 0).eval()
    return request.param, target, drafter


PROMPTS = [[5, 9, 14, 3, 22, 7], [40, 41, 42, 40, 41, 42, 40, 41], [1, 2]]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_every_greedy_method_equals_plain_greedy(pair, prompt):
    kind, target, drafter = pair
    ids = torch.tensor([prompt])
    reference = plain(target, ids, 24, [0]).tokens
    assert speculative(drafter, target, ids, 24, [0]).tokens == reference
    for budget in (1, 5, 12):
        assert tree_speculative(drafter, target, ids, 24, [0], budget).tokens == reference
    looked = prompt_lookup(target, ids, 24, [0], 3)
    assert looked.tokens == reference
    assert has_recurrent(new_cache(target.config)) == (kind == "hybrid")


def test_a_snapshot_restores_the_recurrent_state():
    torch.manual_seed(0)
    target = _hybrid().eval()
    cache = new_cache(target.config)
    with torch.no_grad():
        target.base_model(torch.tensor([[3, 4, 5, 6]]), cache=cache, use_cache=True)
        snap = Snapshot(cache)
        before = [s.clone() for layer, _, rec in snap.states for s in rec.values() if s is not None]
        target.base_model(torch.tensor([[7, 8]]), cache=cache, use_cache=True,
                          position_ids=torch.tensor([[4, 5]]))
        snap.restore()
    after = [s for layer, _, _ in snap.states for s in layer.recurrent_states.values() if s is not None]
    assert before and all(torch.equal(a, b) for a, b in zip(before, after)) and snap.nbytes() > 0


def test_prompt_lookup_candidates_follow_the_earliest_match():
    assert candidates([1, 2, 3, 9, 1, 2], 2) == [3, 9]  # the 2-gram [1, 2] first
    assert candidates([4, 7, 5, 8, 7], 3) == [5, 8, 7]  # no 2-gram match: the 1-gram [7]
    assert candidates([1, 2, 3], 4) == []


def test_leaf_paths_cover_the_tree():
    tree = Tree(tokens=[5, 6, 7, 8], parents=[-1, 0, 0, -1], depths=[1, 2, 2, 1])
    assert leaf_paths(tree) == [[0, 1], [0, 2], [3]]
    assert leaf_paths(Tree([], [], [])) == [[]]
