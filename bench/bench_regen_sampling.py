"""Batched sampled generation on the target: transformers' own temperature + top-p sampling
vs draftline's `NucleusSampler` (draws among the likeliest candidates, generate's greedy
path), same process, same prompts, alternating rounds; greedy decoding as the reference.
Every row decodes the same number of steps, so tokens/s compare directly.

    .venv/bin/python bench/bench_regen_sampling.py      # needs `make all` first
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch
from transformers import LogitsProcessorList

warnings.simplefilter("ignore", FutureWarning)
from bench_regen_cache import seed_batch  # noqa: E402  (this folder is on sys.path)

from draftline.regenerate.kv_cache import growing_cache  # noqa: E402
from draftline.regenerate.sampler import NucleusSampler  # noqa: E402

BATCH, NEW, ROUNDS, TEMPERATURE, TOP_P = 64, 64, 3, 0.7, 0.95


def main() -> None:
    model, ids, attn = seed_batch(BATCH)
    width = ids.shape[1]
    kw = dict(input_ids=ids, attention_mask=attn, max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0, top_k=None)

    def transformers_sampling():
        torch.manual_seed(0)
        return dict(do_sample=True, temperature=TEMPERATURE, top_p=TOP_P)

    def nucleus_sampler():
        sampler = NucleusSampler(TEMPERATURE, TOP_P, list(range(BATCH)))  # a seed per row, as regeneration does
        return dict(do_sample=False, temperature=None, top_p=None, logits_processor=LogitsProcessorList([sampler]))

    methods = {"greedy": lambda: dict(do_sample=False, temperature=None, top_p=None),
               "transformers top-p": transformers_sampling, "NucleusSampler": nucleus_sampler}
    times = {k: [] for k in methods}
    with torch.inference_mode():  # warm-up, so that no method pays for the first call
        model.generate(**{**kw, "max_new_tokens": 4, "min_new_tokens": 4}, **methods["greedy"](),
                       cache=growing_cache(model.config))
    for _ in range(ROUNDS):
        for name, settings in methods.items():
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(**kw, **settings(), cache=growing_cache(model.config))
            times[name].append(time.perf_counter() - t0)
            assert out.shape == (BATCH, width + NEW), (name, out.shape)
    base = statistics.median(times["transformers top-p"])
    print(f"{BATCH} prompts x {NEW} new tokens, temperature {TEMPERATURE}, top-p {TOP_P}, {ROUNDS} alternating rounds")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:20s} {BATCH * NEW / med:7.1f} tokens/s  {base / med:.2f}x transformers' sampling")


if __name__ == "__main__":
    main()
