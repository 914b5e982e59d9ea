"""Extract the doctor's rows as the extract stage does, and overfit a fresh drafter on them.

The features go through the stage's own code (Capture -> shards -> merge -> reader), so a
fault there (a layer off by one) reaches the drafter as it would reach a real run.
Overfitting uses the training step itself (train_step.Step: the block layout, the mask,
the loss), with every answer position an anchor and a plain constant-rate AdamW, and stops
once every drafted position is right on every anchor for a few steps running.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..hidden import ledger
from ..hidden.capture import Capture
from ..hidden.merge import merge
from ..hidden.plan import Record, plan
from ..hidden.producers import TransformersProducer
from ..hidden.reader import load_sequences
from ..hidden.write import write_shards
from ..progress import bar
from ..drafter.train_step import Step

# Shards of at most this size: the doctor's rows fit in one.
SHARD_BYTES = 1 << 30
# Steps in a row at full accuracy before the drafter counts as overfit.
STEADY = 3


def extract(target, rows: list[dict], layer_ids: list[int], folder: Path, pad_id: int,
            state_dtype: str = "bfloat16") -> list:
    """The rows' states at `layer_ids`, written as `state_dtype` and read back as extract and
    train do."""
    hidden = target.config.get_text_config().hidden_size
    record = Record(hidden, len(layer_ids), "none", 0, state_dtype)
    the_plan = plan([len(r["input_ids"]) for r in rows], record, SHARD_BYTES)
    folder.mkdir(parents=True, exist_ok=True)
    capture = Capture(target, layer_ids, record)
    try:
        write_shards(TransformersProducer(capture, 1 << 16, pad_id), rows, the_plan, list(the_plan.shards),
                     folder, layer_ids)
    finally:
        capture.close()
    names = {s.index: s.name for s in the_plan.shards}
    merge(folder, None, layer_ids, record, the_plan, ledger.done(folder, names))
    return load_sequences(folder, "train")


@dataclass(frozen=True)
class Overfit:
    steps: int
    loss: float
    accuracy: list[float]  # teacher-forced, per drafted position, at the last step

    @property
    def done(self) -> bool:
        return min(self.accuracy) == 1.0


def overfit(drafter, seqs: list, embed_w, head_w, dp, tp, mask_id: int, device, lr: float,
            max_steps: int) -> Overfit:
    """Train `drafter` on `seqs` until it drafts every position of every block right."""
    longest = max(s.input_ids.shape[0] for s in seqs)
    tp = tp.model_copy(update={"num_anchors": longest, "prompt_anchors": 0, "loss": "ce", "head_vocab": None,
                               "precision": "float32"})
    drafter.to(device).train()
    step_fn = Step(drafter, embed_w, head_w, dp, tp, mask_id, device)
    params = [p for p in drafter.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    batch = step_fn.blocks(seqs, 0, training=True)  # every answer anchor: the same batch each step
    steady, step, loss, acc = 0, 0, float("nan"), [0.0]
    with bar(total=max_steps, desc="doctor: overfit", unit="step") as pb:
        for step in range(1, max_steps + 1):
            opt.zero_grad(set_to_none=True)
            out, stats = step_fn.loss(seqs, batch, training_head=True)
            out.backward()
            torch.nn.utils.clip_grad_norm_(params, tp.grad_clip)
            opt.step()
            loss = out.item()
            acc = (stats["correct_by_pos"] / stats["count_by_pos"].clamp_min(1)).tolist()
            pb.update(1)
            pb.set_postfix(loss=f"{loss:.4f}", acc=f"{min(acc):.3f}")
            steady = steady + 1 if min(acc) == 1.0 else 0
            if steady == STEADY:
                break
    drafter.eval()
    return Overfit(step, loss, acc)
