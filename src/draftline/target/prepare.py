"""The target stage's work: the target as a plain HF folder, and info.json beside it.

    draftline target --model DIR --info FILE     # stages/target.py
"""

from __future__ import annotations

from pathlib import Path

from ..io import remove
from .info import choose_layers, describe, write_info
from .layout import text_config
from .materialize import materialize, source_config


def prepare(params, model: Path, info_file: Path) -> None:
    # Params that depend on the target are checked against its config first, before the
    # conversion or copy spends minutes (or downloads gigabytes) for nothing.
    choose_layers(params.drafter, int(text_config(source_config(params.target)).num_hidden_layers))
    prov = materialize(params.target, model)
    try:
        info = describe(model, params.target, params.drafter, prov)
        write_info(info_file, info)
    except BaseException:
        # Both outputs or neither: a model folder without its info is a half-run stage.
        remove(model)
        raise
    kinds = sorted({f"{a.split('_')[0]}/{m}" for a, m in zip(info["layer_types"], info["mlp_types"])})
    print(f"target: {info['architecture']} with {info['num_hidden_layers']} layers ({', '.join(kinds)}; "
          f"{info['attention']}), hidden {info['hidden_size']}, drafter reads layers {info['target_layer_ids']}")
    skipped = info["loading"]["other_tower_tensors_skipped"]
    print(f"target: every text tensor loads into {info['loading']['model_class']}"
          + (f"; {skipped} tensors of the vision tower, its projector and MTP layers are skipped by design" if skipped else "")
          + (f"; quantized ({info['quantization']['method']}, {info['quantization']['format']}): dequantized on the CPU"
             if info["quantization"] else ""))

