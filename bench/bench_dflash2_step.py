"""One training step of a DFlash drafter vs a DFlash2 drafter, same process.

The same 8 global batches of the training data (anchors, loss and top-k teacher from the
params, teachers computed beforehand as after the first epoch), the same backbone weights
(the DFlash2 drafter's convolutions start as the identity, its selector fresh). The two
run alternately, forward + backward each, with the training head vocabulary; the script
reports median step times and their ratio, and checks that the DFlash2 step's loss is the
DFlash one plus the selector's term.

    .venv/bin/python bench/bench_dflash2_step.py     # needs `make all` first (the target, hidden states)
"""

from __future__ import annotations

import statistics
import time

import torch
from _setup import training_setup

from draftline.drafter.head_vocab import HeadVocab
from draftline.drafter.model import build_drafter, drafter_config
from draftline.drafter.train_step import Step

BATCHES = 8
REPS = 3


def main() -> None:
    setup = training_setup(BATCHES)
    dp, tp = setup.params.drafter, setup.params.train
    dp1, dp2 = dp.model_copy(update={"arch": "dflash"}), dp.model_copy(update={"arch": "dflash2"})
    info, cfg = setup.info, setup.target_config
    d1 = build_drafter(drafter_config(cfg, dp1, info.target_layer_ids, setup.mask_id), tp.seed)
    d2 = build_drafter(drafter_config(cfg, dp2, info.target_layer_ids, setup.mask_id), tp.seed)
    missing, unexpected = d2.load_state_dict(d1.state_dict(), strict=False)
    assert not unexpected and all("conv" in k or "candidate_selector" in k for k in missing)
    head = HeadVocab.frequent(((s.id, s.input_ids) for s in setup.seqs), tp.head_vocab or 8192, setup.head_w.shape[0])
    steps = {name: Step(d, setup.embed_w, setup.head_w, p, tp, setup.mask_id, head=head)
             for name, d, p in (("dflash", d1, dp1), ("dflash2", d2, dp2))}
    built = [steps["dflash"].blocks(b, 0, training=True) for b in setup.batches]
    for step in steps.values():
        if step.spec.sparse_teacher:
            for b in setup.batches:
                for s in b:
                    step.teacher(s)

    def run(name: str) -> tuple[float, float]:
        step, total = steps[name], 0.0
        t = time.perf_counter()
        for b, blk in zip(setup.batches, built):
            loss, _ = step.loss(b, blk, None, training_head=True)
            loss.backward()
            total += float(loss.detach())
        step.drafter.zero_grad()
        return (time.perf_counter() - t) / len(setup.batches), total

    run("dflash"), run("dflash2")  # warm-up
    times = {"dflash": [], "dflash2": []}
    losses = {}
    for _ in range(REPS):
        for name in times:
            dt, losses[name] = run(name)
            times[name].append(dt)
    a, b = statistics.median(times["dflash"]), statistics.median(times["dflash2"])
    no_sel = Step(d2, setup.embed_w, setup.head_w, dp2, tp.model_copy(update={"selector_weight": 0.0}),
                  setup.mask_id, head=head)
    no_sel._teachers = steps["dflash2"]._teachers
    with torch.no_grad():
        backbone = sum(float(no_sel.loss(bt, blk, None, training_head=True)[0]) for bt, blk in zip(setup.batches, built))
    print(f"loss {tp.loss}, {tp.num_anchors} anchors + {tp.prompt_anchors} prompt anchors, block {dp.block_size}, "
          f"batch {tp.batch_size}, precision {'bf16' if steps['dflash'].bf16 else 'fp32'}, "
          f"threads {torch.get_num_threads()}; selector rank {dp.dflash2.selector_rank}, "
          f"{dp.dflash2.selector_top_k} candidates")
    print(f"summed loss over {BATCHES} batches: dflash {losses['dflash']:.6f}, dflash2 backbone {backbone:.6f} "
          f"(+ selector term {losses['dflash2'] - backbone:.6f})")
    print(f"dflash: {a * 1000:.0f} ms/step; dflash2: {b * 1000:.0f} ms/step; dflash2 costs {b / a:.2f}x")


if __name__ == "__main__":
    main()
