"""The in-place growing KV cache gives what transformers' DynamicCache gives."""

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from draftline.regenerate.kv_cache import GrowingLayer, growing_cache


def test_growing_layer_matches_dynamic_layer_through_growth_and_crops():
    torch.manual_seed(0)
    grow, ref = GrowingLayer(), DynamicLayer()
    for n_new, crop in [(5, 0), (1, 0), (70, 0), (4, 3), (1, 0), (130, 10), (2, 0)]:
        k, v = torch.randn(2, 3, n_new, 8), torch.randn(2, 3, n_new, 8)
        gk, gv = grow.update(k, v)
        rk, rv = ref.update(k, v)
        assert torch.equal(gk, rk) and torch.equal(gv, rv)
        if crop:
            grow.crop(-crop)
            ref.crop(-crop)
            assert grow.get_seq_length() == ref.get_seq_length()


def test_batched_generate_with_growing_cache_equals_dynamic_cache(target_model, tokenizer):
    prompts = ["Write a haiku about rain.", "What is 17 * 3?", "Name three primary colours and explain why."]
    enc = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"] for p in prompts]
    width = max(map(len, enc))
    ids = torch.zeros(len(enc), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, e in enumerate(enc):  # left padding, as the hf backend does
        ids[i, width - len(e):] = torch.tensor(e)
        attn[i, width - len(e):] = 1
    kw = dict(input_ids=ids, attention_mask=attn, max_new_tokens=80, do_sample=False, pad_token_id=0)
    with torch.inference_mode():
        ref = target_model.generate(**kw, cache=DynamicCache(config=target_model.config))
        got = target_model.generate(**kw, cache=growing_cache(target_model.config))
    assert torch.equal(ref, got)
