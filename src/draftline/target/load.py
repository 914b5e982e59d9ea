"""Load the materialised target: its config, tokenizer and model, from the stage's folder.

A folder that holds a `SOURCE.json` pointer instead of weights (`target.materialize:
false`, for large models) loads from the place the pointer names.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..io import read_json

POINTER = "SOURCE.json"  # written instead of weights when a model is not materialised


class TargetError(RuntimeError):
    pass


def model_path(model_dir: str | Path) -> Path:
    """Where the target's files are: the folder itself, or what its pointer names."""
    model_dir = Path(model_dir)
    pointer = model_dir / POINTER
    if pointer.exists():
        return Path(read_json(pointer)["path"])
    return model_dir


def load_config(model_dir: str | Path):
    """The text model's config (a multimodal checkpoint's `text_config`): what every stage
    means by the target."""
    from .layout import text_config

    return text_config(load_checkpoint_config(model_dir))


def load_checkpoint_config(model_dir: str | Path):
    """config.json as the checkpoint declares it (a multimodal wrapper's, for Qwen3.6 and Kimi)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_path(model_dir))


def load_tokenizer(model_dir: str | Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path(model_dir))
    if tok.chat_template is None:
        raise TargetError(f"{model_dir}: tokenizer has no chat template")
    return tok


def load_model(model_dir: str | Path, dtype: str = "float32", device: torch.device | str = "cpu",
               device_map: str | dict | None = None, max_memory: dict | None = None):
    """The target, frozen, in `dtype`. device_map "auto" spreads its layers over every GPU
    this process sees (accelerate), for a target larger than one device; its inputs then
    go to `model.device`, the first one. Fails naming every tensor that did not load
    (load_report.py); quantized checkpoints load through their own library (quantization.py)."""
    model, _ = load_checked(model_dir, dtype, device, device_map, max_memory)
    if not device_map:
        model = model.to(device)
    head = model.get_output_embeddings()
    if head is not None:
        head.register_forward_pre_hook(_contiguous_input)
    return model.eval().requires_grad_(False)


def verify_loading(model_dir: str | Path, dtype: str = "float32") -> dict:
    """The target stage's check, for any size: the model built on the meta device, so the
    report covers every tensor's name and shape while no weight is read into memory."""
    _, report = load_checked(model_dir, dtype, "cpu", {"": "meta"})
    return report.summary()


def load_checked(model_dir: str | Path, dtype: str, device, device_map, max_memory=None):
    """(model, LoadReport) from transformers' own loading report; raises TargetError on any
    missing, unexpected, mis-shaped or unconvertible tensor."""
    import warnings

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    from .load_report import ReportCapture, from_info
    from .quantization import load_kwargs
    from .weights import Tensors, is_other_tower

    path = model_path(model_dir)
    kw: dict = {"device_map": device_map} if device_map else {}
    if device_map and max_memory:  # one rank's own GPUs (extract under torchrun)
        kw["max_memory"] = max_memory
    config = load_checkpoint_config(model_dir)
    load_config = config
    if type(config) not in AutoModelForCausalLM._model_mapping:
        # A wrapper transformers has no text-only class for (Kimi K2.x): load its text model
        # alone, under the text config, with the checkpoint's prefixes mapped onto it; the
        # vision tower's tensors are never read.
        load_config = config.get_text_config(decoder=True)
        kw |= {"config": load_config, "key_mapping": text_key_mapping(model_dir)}
    kw |= load_kwargs(config, load_config)
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # the report is read below, not printed
    try:
        with ReportCapture() as capture, warnings.catch_warnings():
            # quantization_config passed over the checkpoint's: only its load-time switches are taken
            warnings.filterwarnings("ignore", message=".*already has a `quantization_config`")
            try:
                model, info = AutoModelForCausalLM.from_pretrained(
                    path, dtype=getattr(torch, dtype), attn_implementation="sdpa", output_loading_info=True,
                    ignore_mismatched_sizes=True, **kw)
            except RuntimeError as e:
                if not (bad := capture.conversion_errors()):
                    raise
                from .load_report import LoadReport

                LoadReport(_class_name(load_config), conversion=bad).check(str(path))
                raise TargetError(f"{path}: {e}") from e
    finally:
        logging.set_verbosity(verbosity)
    skipped = sum(is_other_tower(k) for k in Tensors(model_dir).weight_map)
    report = from_info(type(model).__name__, info, skipped)
    report.check(str(path))
    return model, report


def _class_name(config) -> str:
    from transformers import AutoModelForCausalLM

    cls = AutoModelForCausalLM._model_mapping.get(type(config), None)
    return cls.__name__ if cls is not None else type(config).__name__


def text_key_mapping(model_dir: str | Path) -> dict[str, str]:
    """Checkpoint prefix -> the causal LM's, from where the embedding sits: Moonshot's
    `language_model.model.*` and `language_model.lm_head.*` become `model.*` and `lm_head.*`."""
    import re

    from .weights import Tensors

    t = Tensors(model_dir)
    emb = t.find("embed_tokens.weight")
    if emb is None:
        raise TargetError(f"{t.path}: no '*embed_tokens.weight' tensor in the checkpoint")
    base = emb[: -len("embed_tokens.weight")]  # e.g. language_model.model.
    outer = base[: -len("model.")] if base.endswith("model.") else base
    return {f"^{re.escape(base)}": "model.", f"^{re.escape(outer)}lm_head\\.": "lm_head."}


def _contiguous_input(module, args):
    # generate() hands the LM head the last position of each row, a strided view; torch's
    # CPU bf16 linear takes a slow path on such views (10 s instead of 15 ms for 64 rows of
    # SmolLM2's 49K-token head), so the view is copied first (a few KB).
    x = args[0]
    return None if x.is_contiguous() else (x.contiguous(), *args[1:])
