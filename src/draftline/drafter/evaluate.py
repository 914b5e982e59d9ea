"""Held-out evaluation: loss (and CE on the target's tokens, comparable whatever the
teacher), accuracy per block position, and the acceptance it implies.

The held-out sequences are the target's own answers, so drafting a block at an anchor and
counting the drafted tokens that equal the next tokens (up to the first miss) is exactly
what greedy verification would accept there: `tau_estimate` = 1 + that mean, a cheap
stand-in for the benchmark's tau during training.
"""

from __future__ import annotations

import torch

from .train_step import Step


def evaluate(step: Step, seqs, batch_size: int, seed: int) -> dict:
    was_training = step.drafter.training
    step.drafter.eval()
    gen = torch.Generator().manual_seed(seed)  # fixed anchors: evals are comparable over steps
    loss_w = ce_w = weight = accepted = blocks = 0.0
    c = torch.zeros(step.dp.block_size - 1)
    n = torch.zeros_like(c)
    with torch.no_grad():
        for i in range(0, len(seqs), batch_size):
            part = seqs[i : i + batch_size]
            batch = step.blocks(part, 0, gen)
            loss, st = step.loss(part, batch)
            loss_w += float(loss) * st["weight"]
            ce_w += st["ce"] * st["weight"]
            weight += st["weight"]
            c += st["correct_by_pos"]
            n += st["count_by_pos"]
            accepted += st["accepted"]
            blocks += st["blocks"]
    step.drafter.train(was_training)
    return {"loss": loss_w / max(weight, 1e-8), "ce": ce_w / max(weight, 1e-8), "acc_by_pos": (c / n.clamp_min(1)).tolist(),
            "tau_estimate": 1 + accepted / max(blocks, 1)}
