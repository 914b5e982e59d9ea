"""One training step with the full LM head vs the training head vocabulary, same process.

Same drafter weights, the same 8 global batches of the training data (anchors from the
params), the params' loss with its top-k teacher computed beforehand (as after the first
epoch). The two variants run alternately, forward + backward each; the script reports
median step times and their ratio, and the restricted set's size and its coverage of the
supervised tokens.

    .venv/bin/python bench/bench_head_vocab.py     # needs `make all` first (the target, hidden states)
"""

from __future__ import annotations

import statistics
import time

import torch
from _setup import training_setup

from draftline.drafter.head_vocab import HeadVocab
from draftline.drafter.train_step import Step

BATCHES = 8
REPS = 3


def main() -> None:
    setup = training_setup(BATCHES)
    dp, tp = setup.params.drafter, setup.params.train
    embed_w, head_w, seqs, batches, drafter = setup.embed_w, setup.head_w, setup.seqs, setup.batches, setup.drafter
    mask_id = setup.mask_id
    size = tp.head_vocab or 8192
    head = HeadVocab.frequent(((s.id, s.input_ids) for s in seqs), size, head_w.shape[0])
    supervised = torch.cat([s.input_ids[s.loss_mask > 0] for s in seqs])
    coverage = float((head.index[supervised] >= 0).float().mean())
    step = Step(drafter, embed_w, head_w, dp, tp, mask_id, head=head)
    built = [step.blocks(b, 0, training=True) for b in batches]
    if step.spec.sparse_teacher:
        for b in batches:
            for s in b:
                step.teacher(s)

    def run(restricted: bool) -> float:
        t = time.perf_counter()
        for b, blk in zip(batches, built):
            loss, _ = step.loss(b, blk, None, training_head=restricted)
            loss.backward()
        drafter.zero_grad()
        return (time.perf_counter() - t) / len(batches)

    run(False), run(True)  # warm-up
    full, sub = [], []
    for _ in range(REPS):
        full.append(run(False))
        sub.append(run(True))
    f, s = statistics.median(full), statistics.median(sub)
    print(f"loss {tp.loss}, {tp.num_anchors} anchors + {tp.prompt_anchors} prompt anchors, block {dp.block_size}, "
          f"batch {tp.batch_size}, precision {'bf16' if step.bf16 else 'fp32'}, threads {torch.get_num_threads()}")
    print(f"head vocabulary: {len(head)} of {head_w.shape[0]} tokens, covering {coverage:.2%} of supervised tokens")
    print(f"full head: {f * 1000:.0f} ms/step; head vocabulary: {s * 1000:.0f} ms/step; {f / s:.2f}x faster")


if __name__ == "__main__":
    main()
