"""What a rejected draft costs on a hybrid (Gated-DeltaNet) target: rolling the recurrent
state back, two ways, against the verify pass itself.

A Qwen3.6-class text model (three linear-attention layers to one full-attention layer, the
real layout from transformers' Qwen3_5 classes, random weights) at a CPU-sized width holds
a context of --context tokens. Per rejected step of a block of --block tokens, accepting
--accepted of them:

- verify: the target pass over the block (what every step costs anyway);
- snapshot + replay (what draftline's decoders do, decode/recurrent.py): copy the linear
  layers' states before the verify pass, restore them, crop the attention layers and run
  the accepted tokens again;
- recompute: rebuild the states from the last accepted position, i.e. re-read the whole
  context into a fresh cache (nothing else knows the state at an earlier position).

Each is timed --repeats times, alternating, in one process; medians and ratios printed.

    .venv/bin/python bench/bench_recurrent.py
    .venv/bin/python bench/bench_recurrent.py --hidden 1024 --layers 16 --context 2048
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from draftline.decode.recurrent import Snapshot
from draftline.decode.verify import keep_cache, new_cache, replay


def _model(hidden: int, layers: int):
    from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    heads = hidden // 64
    cfg = Qwen3_5TextConfig(vocab_size=4096, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                            num_attention_heads=heads, num_key_value_heads=max(1, heads // 4), head_dim=64,
                            linear_num_key_heads=heads // 2, linear_num_value_heads=heads, linear_key_head_dim=64,
                            linear_value_head_dim=64,
                            layer_types=[("full_attention" if (i + 1) % 4 == 0 else "linear_attention")
                                         for i in range(layers)])
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM(cfg).eval()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--block", type=int, default=4)
    ap.add_argument("--accepted", type=int, default=1, help="block tokens kept (anchor included)")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    model = _model(args.hidden, args.layers)
    ctx = torch.randint(0, 4096, (1, args.context))
    block = torch.randint(0, 4096, (1, args.block))
    n, pos = args.context, torch.arange(args.context, args.context + args.block)[None]
    cache = new_cache(model.config)
    model.base_model(ctx, cache=cache, use_cache=True)
    times = {"verify": [], "snapshot + replay": [], "recompute": []}
    nbytes = 0
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        snap = Snapshot(cache)
        t1 = time.perf_counter()
        model.base_model(block, cache=cache, use_cache=True, position_ids=pos)
        t2 = time.perf_counter()
        replay(model, cache, snap, block[0, : args.accepted].tolist(), n)
        t3 = time.perf_counter()
        times["verify"].append(t2 - t1)
        times["snapshot + replay"].append((t1 - t0) + (t3 - t2))
        nbytes = snap.nbytes()
        keep_cache(cache, n)  # back to the context alone for the next round
        Snapshot.restore(snap)
        t4 = time.perf_counter()
        fresh = new_cache(model.config)
        model.base_model(torch.cat([ctx, block[:, : args.accepted]], 1), cache=fresh, use_cache=True)
        times["recompute"].append(time.perf_counter() - t4)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"hybrid target: hidden {args.hidden}, {args.layers} layers ({args.layers // 4} full attention), "
          f"context {n}, block {args.block}, {args.accepted} accepted; snapshot {nbytes / 1e6:.2f} MB; "
          f"{args.repeats} repeats, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| per rejected step | median ms | x verify |")
    print("| --- | --- | --- |")
    for k, v in med.items():
        print(f"| {k} | {v * 1e3:.1f} | {v / med['verify']:.2f} |")
    print(f"recompute / (snapshot + replay): {med['recompute'] / med['snapshot + replay']:.1f}x")


if __name__ == "__main__":
    main()
