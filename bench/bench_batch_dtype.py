"""The target's batched forwards in float32 vs bfloat16 (what `regenerate.dtype` and
`extract.dtype: auto` choose between), same process, same inputs, alternating rounds:
batched greedy generation as regeneration runs it, and a prefill with hidden states as
extraction runs it. Also how many generated rows come out the same in both dtypes.

    .venv/bin/python bench/bench_batch_dtype.py        # needs `make all` first
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch

warnings.simplefilter("ignore", FutureWarning)
from _setup import load_target  # noqa: E402  (this folder is on sys.path)
from bench_regen_cache import seed_batch  # noqa: E402

from draftline.precision import bf16_units  # noqa: E402
from draftline.regenerate.kv_cache import growing_cache  # noqa: E402

BATCH, NEW, ROUNDS, PREFILL = 64, 64, 3, (8, 256)
DTYPES = ("float32", "bfloat16")


def main() -> None:
    if not bf16_units():
        print("this CPU has no bf16 units: `auto` keeps float32 here, nothing to compare")
        return
    _, ids, attn = seed_batch(BATCH)
    models = {d: load_target(d) for d in DTYPES}
    gen_kw = dict(input_ids=ids, attention_mask=attn, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                  pad_token_id=0)
    x = torch.randint(0, models["float32"].config.vocab_size, PREFILL, generator=torch.Generator().manual_seed(0))
    gen_t = {d: [] for d in DTYPES}
    pre_t = {d: [] for d in DTYPES}
    outs = {}
    with torch.inference_mode():
        for d, m in models.items():  # warm-up: kernels and allocator
            m.generate(**{**gen_kw, "max_new_tokens": 4, "min_new_tokens": 4}, cache=growing_cache(m.config))
            m.model(x[:, :32], output_hidden_states=True)
        for _ in range(ROUNDS):
            for d, m in models.items():
                t0 = time.perf_counter()
                outs[d] = m.generate(**gen_kw, cache=growing_cache(m.config))
                gen_t[d].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                m.model(x, output_hidden_states=True)
                pre_t[d].append(time.perf_counter() - t0)
    same = int((outs["float32"] == outs["bfloat16"]).all(1).sum())
    print(f"{BATCH} seed prompts x {NEW} greedy tokens; prefill {PREFILL[0]}x{PREFILL[1]} tokens with hidden states; "
          f"{ROUNDS} alternating rounds after a warm-up")
    g32, p32 = statistics.median(gen_t["float32"]), statistics.median(pre_t["float32"])
    for d in DTYPES:
        g, p = statistics.median(gen_t[d]), statistics.median(pre_t[d])
        print(f"{d:9s} generation {BATCH * NEW / g:7.1f} tokens/s ({g32 / g:.2f}x)   "
              f"prefill {PREFILL[0] * PREFILL[1] / p:7.1f} tokens/s ({p32 / p:.2f}x)")
    print(f"rows identical in both dtypes over {NEW} tokens: {same} of {BATCH}")


if __name__ == "__main__":
    main()
