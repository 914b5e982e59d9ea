"""Profile the two hot paths whose shape the pipeline depends on, each against its
naive alternative in the same process (ratios, not absolute times).

1. The drafter loss: the target's 49K-row LM head on the supervised slots. Three ways in
   one run: applied to a strided [b, A, B-1, H] view of the block outputs; to the same
   rows made one contiguous [N, H] matrix; and draftline's fused chunked head+loss
   (draftline.drafter.loss), in fp32 and in bf16.
2. Extraction: the base model only (what draftline.hidden.capture does) versus the full causal
   LM, which also computes logits that extraction would throw away.

    .venv/bin/python bench/bench_hot_paths.py        # needs the target (make all, or dvc repro target)
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from _setup import load_target


def timed(fn, reps=5):
    fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def lm_head(model):
    w = model.get_output_embeddings().weight.detach()
    b, A, B, H = 8, 64, 8, w.shape[1]
    hidden = torch.randn(b, A * B, H, requires_grad=True)
    labels = torch.randint(0, w.shape[0], (b, A, B - 1))

    def strided():
        view = hidden.view(b, A, B, H)[:, :, 1:, :]  # non-contiguous
        loss = F.cross_entropy(F.linear(view, w).flatten(0, 2), labels.flatten())
        loss.backward()

    def contiguous():
        rows = hidden.view(b, A, B, H)[:, :, 1:, :].reshape(-1, H).contiguous()
        loss = F.cross_entropy(F.linear(rows, w), labels.flatten())
        loss.backward()

    from draftline.drafter.loss import LossSpec, _FusedHeadLoss

    wts = torch.ones(b * A * (B - 1))

    def fused(dtype):
        def run():
            rows = hidden.view(b, A, B, H)[:, :, 1:, :].reshape(-1, H).contiguous()
            loss, _ = _FusedHeadLoss.apply(rows, w, labels.flatten(), wts, None, LossSpec("ce"), wts.sum(), dtype)
            loss.backward()
        return run

    return timed(strided), timed(contiguous), timed(fused(torch.float32)), timed(fused(torch.bfloat16))


@torch.inference_mode()
def extraction(model):
    ids = torch.randint(100, 40000, (8, 256))

    def full():
        model(input_ids=ids, output_hidden_states=True)

    def base_only():
        model.get_decoder()(input_ids=ids, output_hidden_states=True)

    return timed(full, 3), timed(base_only, 3)


def main():
    torch.set_num_threads(torch.get_num_threads())
    model = load_target()
    s, c, f32, bf16 = lm_head(model)
    print(f"LM-head loss fwd+bwd, 3584 slots: strided {s * 1e3:.0f} ms, contiguous {c * 1e3:.0f} ms "
          f"(strided/contiguous {s / c:.2f}x); fused fp32 {f32 * 1e3:.0f} ms ({c / f32:.2f}x faster than "
          f"contiguous), fused bf16 {bf16 * 1e3:.0f} ms ({c / bf16:.2f}x)")
    f, b = extraction(model)
    print(f"extraction of 8x256 tokens: with logits {f * 1e3:.0f} ms, base only {b * 1e3:.0f} ms, "
          f"ratio {f / b:.2f}x")


if __name__ == "__main__":
    main()
