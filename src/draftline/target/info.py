"""What later stages know of the target without loading it: the target stage's info file.

The target stage records architecture, layer count, hidden size, the end-of-sequence ids
and the layers whose hidden states feed the drafter (`drafter.target_layer_ids`, checked
against the target here, once, before any stage spends time on them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..io import read_json, write_json
from .layout import describe_layers, eos_ids
from .load import TargetError, load_config, load_tokenizer, model_path

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.drafter import DrafterParams
    from ..config.target import TargetParams


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's default: the middle layer for one drafter layer, else spread from layer 1
    to layer N-3 (so the last, most output-specialised layers are skipped)."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [round(start + i * (end - start) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


@dataclass(frozen=True)
class TargetInfo:
    """What later stages need to know about the target without loading it."""

    architecture: str
    model_type: str
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int
    target_layer_ids: list[int]
    eos_token_ids: list[int]
    dtype: str
    attention: str  # gqa | mla
    layer_types: list[str]  # per layer: full_attention | linear_attention | sliding_attention
    mlp_types: list[str]  # per layer: dense | moe

    @classmethod
    def load(cls, path: str | Path) -> "TargetInfo":
        data = read_json(path)
        missing = [k for k in cls.__dataclass_fields__ if k not in data]
        if missing:
            raise TargetError(f"{path}: no {missing} (written by an older target stage: `dvc repro -f target`)")
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})

    @property
    def hybrid(self) -> bool:
        """Some layers keep a recurrent state instead of past keys (Gated DeltaNet)."""
        return any(t == "linear_attention" for t in self.layer_types)


def choose_layers(drafter: DrafterParams, num_layers: int) -> list[int]:
    ids = drafter.target_layer_ids or build_target_layer_ids(num_layers, drafter.num_layers)
    for i in ids:
        if not 0 <= i < num_layers:
            raise TargetError(
                f"drafter.target_layer_ids: layer {i} out of range for a {num_layers}-layer target (0..{num_layers - 1})"
            )
    if len(set(ids)) != len(ids):
        raise TargetError(f"drafter.target_layer_ids: duplicate layers in {ids}")
    return list(ids)


def describe(model_dir: Path, target: TargetParams, drafter: DrafterParams, provenance: dict) -> dict:
    from .load import load_checkpoint_config, verify_loading
    from .quantization import describe_format

    checkpoint = load_checkpoint_config(model_dir)
    quantization = describe_format(checkpoint, f"{model_path(model_dir)}/config.json")
    loading = verify_loading(model_dir, target.dtype)
    config = load_config(model_dir)  # the text model's
    tok = load_tokenizer(model_dir)
    n = int(config.num_hidden_layers)
    return {
        "architecture": (checkpoint.architectures or [type(checkpoint).__name__])[0],
        "model_type": config.model_type,  # the text model's (qwen3_5_text, deepseek_v3)
        "checkpoint_model_type": checkpoint.model_type,  # what config.json declares (qwen3_5, kimi_k25)
        "num_hidden_layers": n,
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(config.vocab_size),
        "target_layer_ids": choose_layers(drafter, n),
        "eos_token_ids": eos_ids(model_path(model_dir), config, tok),
        "dtype": target.dtype,
        **describe_layers(config),
        # null: unquantized; else the method and scheme the weights were dequantized from
        "quantization": quantization,
        # transformers' loading report, checked: the class every text tensor loaded into, and
        # the other towers' tensors (vision, projector, MTP) left out by design
        "loading": loading,
        "provenance": provenance,
    }


def write_info(path: Path, info: dict) -> None:
    write_json(path, info)
