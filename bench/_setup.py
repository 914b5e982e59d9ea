"""What the scripts under bench/ share: the repository root, the params, the pipeline's
paths, the target (model, tokenizer, config, info, head and embeddings), the trained
drafter, the held-out prompts, the training sequences, and the training-step setup.

No script spells a data path: `path(name)` is the path dvc.yaml declares as `paths.<name>`
(`vars: - paths: {...}`, read by `draftline.paths`), taken from the repository root so a
script runs from any folder. Most loaders need `make all` first.

A script imports this module as a sibling (`from _setup import ...`): `python bench/x.py`
puts bench/ on sys.path. draftline itself comes from the installed package. The heavy
draftline modules (transformers, the drafter) are imported when a loader is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from draftline.config import params as config
from draftline.paths import declared

if TYPE_CHECKING:
    import torch

    from draftline.target.info import TargetInfo

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
DVC_FILE = ROOT / "dvc.yaml"
# Where every pipeline output lies (the folder of dvc.yaml's data paths); the GPU check
# writes its logs and table in here too.
DATA = ROOT / "data"


def path(name: str) -> Path:
    """`paths.<name>` in dvc.yaml (e.g. "target_model"), under the repository root."""
    return ROOT / declared(name, DVC_FILE)


def load_params(file: str | Path = PARAMS) -> config.Params:
    """The params the pipeline ran with (the repository's params.yaml by default)."""
    return config.load_params(file)


def load_info() -> TargetInfo:
    """The target stage's description of the target (dtype, stop ids, captured layers)."""
    from draftline.target.info import TargetInfo

    return TargetInfo.load(path("target_info"))


def load_target(dtype: str = "float32", device: torch.device | str = "cpu"):
    """The materialised target, frozen, in `dtype` on `device`."""
    from draftline.target import load

    return load.load_model(path("target_model"), dtype, device)


def load_tokenizer():
    from draftline.target import load

    return load.load_tokenizer(path("target_model"))


def load_target_config():
    from draftline.target import load

    return load.load_config(path("target_model"))


def load_io_weights() -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embeddings and LM head weights."""
    from draftline.target import weights

    return weights.load_io_weights(path("target_model"))


def load_drafter(folder: str | Path | None = None):
    """The trained drafter (the train stage's output unless `folder` is given)."""
    from draftline.drafter import model

    return model.load_drafter(folder or path("drafter"))


def eval_prompts() -> list[dict]:
    """The held-out prompts the benchmark stage decodes."""
    from draftline.io import read_parquet

    return read_parquet(path("mix_eval"))


def train_sequences() -> list:
    """The extracted training sequences (ids, loss mask, captured hidden states)."""
    from draftline.hidden.reader import load_sequences

    return load_sequences(path("hidden"), "train")


@dataclass
class TrainSetup:
    params: object
    mask_id: int
    embed_w: torch.Tensor
    head_w: torch.Tensor
    seqs: list
    batches: list  # the first global batches of epoch 0, as sequences
    drafter: torch.nn.Module
    info: TargetInfo
    target_config: object


def training_setup(n_batches: int) -> TrainSetup:
    """The params, the target's head and embeddings, the training sequences, the first
    `n_batches` global batches of epoch 0 and a fresh drafter (train.seed). Needs `make all`
    first (the target and the extracted hidden states)."""
    from draftline.drafter.batching import epoch_batches
    from draftline.drafter.model import build_drafter, drafter_config, mask_token_id

    params = load_params()
    dp, tp = params.drafter, params.train
    info = load_info()
    mask_id = mask_token_id(load_tokenizer(), dp.mask_token)
    embed_w, head_w = load_io_weights()
    seqs = train_sequences()
    order = epoch_batches([s.input_ids.shape[0] for s in seqs], [s.id for s in seqs], tp.batch_size, tp.seed, 0)
    batches = [[seqs[i] for i in b] for b in order[:n_batches]]
    cfg = load_target_config()
    drafter = build_drafter(drafter_config(cfg, dp, info.target_layer_ids, mask_id), tp.seed)
    return TrainSetup(params, mask_id, embed_w, head_w, seqs, batches, drafter, info, cfg)
