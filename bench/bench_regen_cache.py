"""Batched greedy generation on the target: draftline's in-place KV cache vs transformers'
DynamicCache, same process, same prompts, alternating rounds; outputs must be identical.

    make bench-regen        # needs `make all` first (the target, the seed prompts)
"""

from __future__ import annotations

import json
import statistics
import time

import torch
from _setup import load_target, load_tokenizer, path
from transformers import DynamicCache

from draftline.regenerate.kv_cache import growing_cache

BATCH, NEW, ROUNDS = 64, 96, 2


def seed_batch(n: int):
    """The target (after `make all`) and the first n seed prompts, left-padded into one batch."""
    model = load_target("float32").eval()
    tok = load_tokenizer()
    rows = [json.loads(line) for line in (path("prompt_files") / "prompts.jsonl").open()][:n]
    enc = [tok.apply_chat_template(r["messages"][:1], add_generation_prompt=True, tokenize=True,
                                   return_dict=True)["input_ids"] for r in rows]
    width = max(map(len, enc))
    ids = torch.zeros(len(enc), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, e in enumerate(enc):
        ids[i, width - len(e):] = torch.tensor(e)
        attn[i, width - len(e):] = 1
    return model, ids, attn


def main() -> None:
    model, ids, attn = seed_batch(BATCH)
    kw = dict(input_ids=ids, attention_mask=attn, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
              pad_token_id=0)
    caches = {"DynamicCache": lambda: DynamicCache(config=model.config),
              "draftline growing cache": lambda: growing_cache(model.config)}
    times = {k: [] for k in caches}
    outs = {}
    for _ in range(ROUNDS):
        for name, make in caches.items():
            t0 = time.perf_counter()
            with torch.inference_mode():
                outs[name] = model.generate(**kw, cache=make())
            times[name].append(time.perf_counter() - t0)
    a, b = outs.values()
    assert torch.equal(a, b), "outputs differ"
    base = statistics.median(times["DynamicCache"])
    print(f"{BATCH} prompts x {NEW} new tokens, greedy, {ROUNDS} alternating rounds; outputs identical")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:24s} {BATCH * NEW / med:7.1f} tokens/s  {base / med:.2f}x")


if __name__ == "__main__":
    main()
