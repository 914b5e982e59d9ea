"""One training step with block attention vs one dense masked sdpa call, same process.

Same drafter weights, the same 8 global batches of the training data (anchors from the
params), the params' loss with its top-k teacher computed beforehand; forward + backward.
Both attentions run alternately in float32 and, on hardware with bf16 units, in bf16
autocast. The script reports median step times, their ratio and the two losses (equal up
to rounding: the same attention, computed without the dead block columns).

    .venv/bin/python bench/bench_block_attention.py     # needs `make all` first (the target, hidden states)
"""

from __future__ import annotations

import statistics
import time

import torch
from _setup import training_setup

from draftline.drafter.head_vocab import HeadVocab
from draftline.drafter.train_step import Step
from draftline.precision import bf16_units

BATCHES = 8
REPS = 3


def main() -> None:
    setup = training_setup(BATCHES)
    dp, tp = setup.params.drafter, setup.params.train
    embed_w, head_w, batches, drafter, mask_id = setup.embed_w, setup.head_w, setup.batches, setup.drafter, setup.mask_id
    head = HeadVocab.frequent(((s.id, s.input_ids) for s in setup.seqs), tp.head_vocab, head_w.shape[0]) if tp.head_vocab else None
    lengths = [max(s.input_ids.shape[0] for s in b) for b in batches]
    print(f"loss {tp.loss}, {tp.num_anchors} anchors + {tp.prompt_anchors} prompt anchors, block {dp.block_size}, "
          f"batch {tp.batch_size}, longest sequence per batch {min(lengths)}-{max(lengths)} tokens, "
          f"threads {torch.get_num_threads()}")
    for precision in ["float32"] + (["bfloat16"] if bf16_units() else []):
        steps = {a: Step(drafter, embed_w, head_w, dp, tp.model_copy(update={"precision": precision, "attention": a}),
                         mask_id, head=head) for a in ("sdpa", "blocks")}
        built = [steps["sdpa"].blocks(b, 0, training=True) for b in batches]
        for step in steps.values():
            if step.spec.sparse_teacher:
                for b in batches:
                    for s in b:
                        step.teacher(s)

        def run(attention: str) -> tuple[float, float]:
            t, total = time.perf_counter(), 0.0
            for b, blk in zip(batches, built):
                loss, _ = steps[attention].loss(b, blk, None, training_head=True)
                loss.backward()
                total += float(loss.detach())
            drafter.zero_grad()
            return (time.perf_counter() - t) / len(batches), total

        run("sdpa"), run("blocks")  # warm-up
        times = {"sdpa": [], "blocks": []}
        losses = {}
        for _ in range(REPS):
            for a in times:
                dt, losses[a] = run(a)
                times[a].append(dt)
        d, b = statistics.median(times["sdpa"]), statistics.median(times["blocks"])
        rel = abs(losses["blocks"] - losses["sdpa"]) / abs(losses["sdpa"])
        print(f"{precision}: sdpa {d * 1000:.0f} ms/step, blocks {b * 1000:.0f} ms/step, {d / b:.2f}x faster; "
              f"summed loss of the {BATCHES} batches {losses['sdpa']:.6f} vs {losses['blocks']:.6f} (rel diff {rel:.1e})")


if __name__ == "__main__":
    main()
