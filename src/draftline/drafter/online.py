"""Online features (`train.features: online`): the frozen target runs inside the training
processes and computes each batch's context features and teacher, so nothing is stored.

Offline training reads states that `extract` computed once and stored (61 KB a token at a
27B target's width); online training pays a target forward per batch instead, every
epoch, and stores nothing. Online pays where storage or its I/O is the limit, or for a
single epoch over a large set; offline where the set is read many times, as the embedded
default's five epochs are.

The features are the extract stage's own: the same hooks (hidden/capture.py) on the same
layers, the final state after the final norm, rounded to bf16 as stored, and quantized to
FP8 with its scales only where `extract.state_dtype` asks for it, as extract stores them,
so a batch gives the same loss online as offline within the rounding of the stored dtype. The target runs under inference mode,
in `extract.dtype` (bf16 on GPUs and on CPUs with bf16 units) and, with
`--target-device-map auto`, across the GPUs of the process: under torchrun, each rank over its
own share of the node's GPUs, as extract places it (devices.target_max_memory).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import torch

from ..devices import target_max_memory
from ..distributed import World
from ..hidden.capture import right_padded
from ..hidden.plan import Record
from ..hidden.state_dtype import is_fp8, quantize
from ..hidden.store import Sequence
from ..hidden.token_rows import TokenRows


class OnlineRows:
    """The rows of `split` in the tokens file, their features computed when read.

    `read(indices)` runs the target once over those rows (right-padded, as extract does).
    `lock` is shared by every OnlineRows over one target: the capture's hooks see whichever
    forward runs, so the training rows' prefetch thread and the held-out evaluation take
    turns."""

    def __init__(self, rows: TokenRows, split: str, capture, pad_id: int, lock: threading.Lock,
                 state_dtype: str = "bfloat16"):
        mask = pc.equal(rows.table["split"], split).to_numpy(zero_copy_only=False)
        self.rows = np.flatnonzero(mask).tolist()
        self._tokens = rows
        all_ids = rows.table["id"].to_pylist()
        self.ids = [all_ids[i] for i in self.rows]
        self.lengths = [rows.lengths[i] for i in self.rows]
        self.capture, self.pad_id, self.lock = capture, pad_id, lock
        self.layers = len(capture.layer_ids)
        self.width = self.layers * capture.record.hidden
        self.state_dtype = state_dtype

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.read(list(range(*i.indices(len(self)))))
        return self.read([i])[0]

    def token_ids(self):
        for i, r in zip(self.rows, self.ids):
            yield r, torch.tensor(self._tokens[i]["input_ids"])

    def read(self, indices: list[int]) -> list[Sequence]:
        if not indices:
            return []
        rows = [self._tokens[self.rows[i]] for i in indices]
        lengths = [len(r["input_ids"]) for r in rows]
        ids, attn = right_padded([r["input_ids"] for r in rows], self.pad_id)
        with self.lock:
            states, _, _ = self.capture(ids, attn)
        out = []
        for j, r in enumerate(rows):
            s, scale = states[j, : lengths[j]], None
            if is_fp8(self.state_dtype):  # as extract would store them (on the target's device)
                s, scale = quantize(s, self.capture.record.hidden)
            final = s[:, self.width :] if self.has_final else None
            out.append(Sequence(r["id"], r["split"], s[:, : self.width], final, torch.tensor(r["input_ids"]),
                                torch.tensor(r["loss_mask"], dtype=torch.float32), None, None,
                                None if scale is None else scale[:, : self.layers],
                                None if scale is None or final is None else scale[:, self.layers :]))
        return out

    @property
    def has_final(self) -> bool:
        return self.capture.record.teacher == "final"

    def close(self) -> None:
        pass


def online_rows(params, model_dir: Path, info, tokens: Path, world: World, device_map: str | None):
    """(train rows, val rows) over one loaded target, on this rank's device(s): the training
    split's and the held-out split's features come from the same frozen model."""
    from ..hidden.capture import Capture
    from ..precision import batch_dtype
    from ..target.load import load_model, load_tokenizer

    teacher = "none" if params.train.loss == "ce" else "final"
    record = Record(info.hidden_size, len(info.target_layer_ids), teacher)
    dtype = batch_dtype(params.extract.dtype, info.dtype, world.device)
    model = load_model(model_dir, dtype, world.device, device_map, max_memory=target_max_memory(device_map, world))
    tok = load_tokenizer(model_dir)
    pad = tok.pad_token_id if tok.pad_token_id is not None else info.eos_token_ids[0]
    capture, lock, rows = Capture(model, info.target_layer_ids, record), threading.Lock(), TokenRows.read(tokens)
    state_dtype = params.extract.state_dtype
    return (OnlineRows(rows, "train", capture, pad, lock, state_dtype),
            OnlineRows(rows, "val", capture, pad, lock, state_dtype))
