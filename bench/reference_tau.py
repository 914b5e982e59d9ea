"""Cross-check the benchmark stage against z-lab's reference decoder on the trained drafter.

Runs `dflash.model.dflash_generate` (the official implementation) with data/drafter and the
target on the same prompts the benchmark stage used, and compares its tau and outputs with
draftline's own loop. Prints both tau values and their difference.

    .venv/bin/python bench/reference_tau.py      # after `make all`
"""

from __future__ import annotations

import os
import time
import warnings

import torch

warnings.simplefilter("ignore", FutureWarning)

import dflash.model as zlab  # noqa: E402
from _setup import eval_prompts, load_drafter, load_info, load_params, load_target, load_tokenizer  # noqa: E402

from draftline.decode.acceptance import tau  # noqa: E402
from draftline.decode.chain import speculative  # noqa: E402
from draftline.decode.requests import encode_prompt, first_turn, select_prompts  # noqa: E402
from draftline.devices import compute_device  # noqa: E402


def main() -> None:
    device = compute_device(os.environ.get("DRAFTLINE_DEVICE"))  # the library reads no environment
    if device.type == "cpu":
        zlab._cuda_time = time.perf_counter  # return_stats synchronises CUDA; time on the CPU instead
    bp = load_params().benchmark
    info = load_info()
    target = load_target(info.dtype, device)
    tok = load_tokenizer()
    drafter = load_drafter().to(device)
    prompts = select_prompts(eval_prompts(), bp.prompts_per_source)
    ours, theirs, same = [], [], 0
    for p in prompts:
        ids = encode_prompt(tok, first_turn(p["messages"])).to(device)
        mine = speculative(drafter, target, ids, bp.max_new_tokens, info.eos_token_ids)
        ref = zlab.dflash_generate(drafter, target, ids, bp.max_new_tokens, info.eos_token_ids, return_stats=True)
        ours.append(mine.acceptance_lengths)
        theirs.append(ref.acceptance_lengths)
        same += ref.output_ids[0, ids.shape[1]:].tolist() == mine.tokens
    print(f"device {device}; prompts {len(prompts)}; identical outputs {same}/{len(prompts)}")
    print(f"tau draftline {tau(ours):.4f}  dflash_generate {tau(theirs):.4f}  |diff| {abs(tau(ours) - tau(theirs)):.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
