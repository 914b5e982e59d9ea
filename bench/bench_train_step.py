"""One drafter training step: draftline vs SpecForge 0.2.0's OnlineDFlashModel, same process.

Same batch (the first global batch of the training data), same drafter weights, block size
and anchors (SpecForge's anchor sampler is replaced by ours), same loss (CE with position
decay, SpecForge's "dflash" loss), both fp32; SpecForge with its sdpa backend, draftline
with its CPU default (`train.attention: auto`: block attention). The script first checks
the two losses agree, then times forward + backward alternately and reports medians and
the ratio.

    make bench-train        # needs `make all` first (the target, hidden states)
"""

from __future__ import annotations

import statistics
import time

import torch
from _setup import training_setup

from draftline.drafter.train_step import Step

REPS = 6


def specforge_model(ours, embed_w, head_w, mask_id, block_size, num_anchors, gamma):
    from specforge.algorithms.common.dflash_family_model import OnlineDFlashModel
    from specforge.modeling.draft.dflash import DFlashDraftModel

    draft = DFlashDraftModel(ours.config).float()
    missing, unexpected = draft.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    lm_head = torch.nn.Linear(head_w.shape[1], head_w.shape[0], bias=False)
    lm_head.weight = torch.nn.Parameter(head_w.clone(), requires_grad=False)
    embed = torch.nn.Embedding.from_pretrained(embed_w.clone(), freeze=True)
    return OnlineDFlashModel(draft, lm_head, embed, mask_id, block_size=block_size, attention_backend="sdpa",
                             num_anchors=num_anchors, loss_decay_gamma=gamma)


def main() -> None:
    # The first global batch of epoch 0 and the drafter built from train.seed; the precision
    # and loss overrides change neither (batch size and seed stay the params').
    setup = training_setup(1)
    dp, tp = setup.params.drafter, setup.params.train.model_copy(update={"precision": "float32", "loss": "ce"})
    mask_id, embed_w, head_w, ours = setup.mask_id, setup.embed_w, setup.head_w, setup.drafter
    batch_seqs = setup.batches[0]
    step = Step(ours, embed_w, head_w, dp, tp, mask_id)
    blocks = step.blocks(batch_seqs, 0)

    # SpecForge's inputs: padded [b, L] ids / loss mask and [b, L, layers*H] features; our anchors.
    b, L = len(batch_seqs), blocks.context.shape[1]
    ids = torch.zeros(b, L, dtype=torch.long)
    mask = torch.zeros(b, L)
    for i, s in enumerate(batch_seqs):
        ids[i, : s.input_ids.shape[0]] = s.input_ids
        mask[i, : s.input_ids.shape[0]] = s.loss_mask
    A = blocks.labels.shape[1]
    anchor_pos = blocks.position_ids[:, L:].view(b, A, dp.block_size)[:, :, 0]
    keep = blocks.weights.sum(-1) > 0
    sf = specforge_model(ours, embed_w, head_w, mask_id, dp.block_size, tp.num_anchors, tp.gamma)
    sf._sample_anchor_positions = lambda seq_len, loss_mask, device: (torch.where(keep, anchor_pos, 0), keep)

    def run_ours():
        ours.zero_grad(set_to_none=True)
        loss, _ = step.loss(batch_seqs, blocks)
        loss.backward()
        return loss.item()

    def run_sf(bf16=False):
        sf.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, _, _ = sf(ids, blocks.context, mask)
        loss.backward()
        return loss.item()

    def timed(a, b):
        t_a, t_b = [], []
        for _ in range(REPS):  # alternate, so machine noise hits both alike
            t = time.perf_counter()
            a()
            t_a.append(time.perf_counter() - t)
            t = time.perf_counter()
            b()
            t_b.append(time.perf_counter() - t)
        return statistics.median(t_a), statistics.median(t_b)

    l_ours, l_sf = run_ours(), run_sf()
    g_ours = {n: p.grad.clone() for n, p in ours.named_parameters()}
    g_sf = dict(sf.draft_model.named_parameters())
    rel = max(float((g_ours[n] - g_sf[n].grad).norm() / g_ours[n].norm().clamp_min(1e-12)) for n in g_ours)
    print(f"loss: draftline {l_ours:.6f}, SpecForge {l_sf:.6f} (rel diff {abs(l_ours - l_sf) / l_sf:.2e}); "
          f"max relative gradient difference {rel:.2e}")
    assert abs(l_ours - l_sf) / l_sf < 1e-4 and rel < 1e-3, "the two steps do not compute the same loss"
    o, s = timed(run_ours, run_sf)
    # bf16 autocast for both (the default on CPUs with bf16 units and on GPUs); timing only.
    step_bf16 = Step(ours, embed_w, head_w, dp, tp.model_copy(update={"precision": "bfloat16"}), mask_id)

    def run_ours_bf16():
        ours.zero_grad(set_to_none=True)
        loss, _ = step_bf16.loss(batch_seqs, blocks)
        loss.backward()

    ob, sb = timed(run_ours_bf16, lambda: run_sf(True))
    slots = int((blocks.weights > 0).sum())
    print(f"batch: {b} sequences, {A} anchors max, block {dp.block_size}, {dp.num_layers} layers, "
          f"{slots} supervised slots, {torch.get_num_threads()} threads")
    for name, a, b_ in (("fp32", o, s), ("bf16 autocast", ob, sb)):
        print(f"train step fwd+bwd, {name} (median of {REPS}): draftline {a * 1e3:.0f} ms, "
              f"SpecForge {b_ * 1e3:.0f} ms; draftline {b_ / a:.2f}x faster")


if __name__ == "__main__":
    main()
