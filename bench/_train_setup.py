"""What the training-step benchmarks share: the params, the target's head and embeddings,
the training sequences, the first global batches of epoch 0 and a drafter."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from draftline import target as tgt  # noqa: E402
from draftline.config import load_params  # noqa: E402
from draftline.drafter.batching import epoch_batches  # noqa: E402
from draftline.drafter.model import build_drafter, drafter_config, mask_token_id  # noqa: E402
from draftline.hidden_store import load_sequences  # noqa: E402


@dataclass
class TrainSetup:
    params: object
    mask_id: int
    embed_w: torch.Tensor
    head_w: torch.Tensor
    seqs: list
    batches: list  # the first global batches of epoch 0, as sequences
    drafter: torch.nn.Module


def training_setup(n_batches: int) -> TrainSetup:
    """Needs `make all` first (data/target, data/hidden)."""
    params = load_params(ROOT / "params.yaml")
    dp, tp = params.drafter, params.train
    info = tgt.TargetInfo.load("data/target/info.json")
    mask_id = mask_token_id(tgt.load_tokenizer("data/target/model"), dp.mask_token)
    embed_w, head_w = tgt.load_io_weights("data/target/model")
    seqs = load_sequences(Path("data/hidden"), "train")
    order = epoch_batches([s.input_ids.shape[0] for s in seqs], [s.id for s in seqs], tp.batch_size, tp.seed, 0)
    batches = [[seqs[i] for i in b] for b in order[:n_batches]]
    drafter = build_drafter(drafter_config(tgt.load_config("data/target/model"), dp, info.target_layer_ids, mask_id),
                            tp.seed)
    return TrainSetup(params, mask_id, embed_w, head_w, seqs, batches, drafter)
