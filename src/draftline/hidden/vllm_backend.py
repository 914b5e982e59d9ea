"""`extract.backend: vllm`: vLLM runs the target (tensor parallel across a node's GPUs),
its `extract_hidden_states` method writes one file per request, and each shard's files
are converted (vllm_files.py) and deleted as soon as the shard is written, so the
per-request files never hold more than one shard's worth. Needs the `gpu` extra; nothing
here is imported on the CPU path.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..target.layout import norm_offset
from ..target.load import load_config
from ..target.weights import Tensors, final_norm, load_io_weights
from .plan import Record
from .vllm_files import FinalNorm, VllmFileError, convert, vllm_layer_ids


def engine_args(model_dir: Path, layer_ids: list[int], num_layers: int, teacher: str, tp: int,
                storage: Path) -> dict:
    """vLLM's documented settings for hidden-state extraction (chunked prefill off)."""
    return {
        "model": str(model_dir),
        "tensor_parallel_size": tp,
        "enable_chunked_prefill": False,
        "speculative_config": {
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {
                "eagle_aux_hidden_state_layer_ids": vllm_layer_ids(layer_ids, num_layers, teacher)}},
        },
        "kv_transfer_config": {
            "kv_connector": "ExampleHiddenStatesConnector",
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": str(storage)},
        },
    }


class VllmProducer:
    def __init__(self, model_dir: Path, info, record: Record, p):
        from vllm import LLM, SamplingParams

        self.info, self.record = info, record
        self.storage = Path(p.vllm_storage)
        self.storage.mkdir(parents=True, exist_ok=True)
        self.llm = LLM(**engine_args(model_dir, info.target_layer_ids, info.num_hidden_layers, record.teacher,
                                     p.vllm_tensor_parallel_size, self.storage))
        self.sampling = SamplingParams(max_tokens=1)
        text = load_config(model_dir)
        t = Tensors(model_dir)
        self.norm = FinalNorm(final_norm(t), getattr(text, "rms_norm_eps", 1e-6), norm_offset(text))
        self.head = None
        if record.teacher == "top_k":
            _, w = load_io_weights(model_dir)
            dev = "cuda" if torch.cuda.is_available() else "cpu"
            self.head = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device=dev, dtype=torch.bfloat16)
            self.head.weight.data.copy_(w)
        self.padded = 0

    def __call__(self, shard_rows: list[dict]):
        outs = self.llm.generate([{"prompt_token_ids": r["input_ids"]} for r in shard_rows], self.sampling,
                                 use_tqdm=False)
        for row, o in zip(shard_rows, outs):
            path = (getattr(o, "kv_transfer_params", None) or {}).get("hidden_states_path")
            if not path:
                raise VllmFileError(f"vLLM returned no hidden_states_path for row {row['id']!r}: is "
                                    "ExampleHiddenStatesConnector configured (vllm >= 0.18)?")
            path = Path(path)
            try:
                states, k_ids, k_lp = convert(path, row, self.info.target_layer_ids, self.info.num_hidden_layers,
                                              self.record, self.norm, self.head)
            finally:
                path.unlink(missing_ok=True)
                Path(f"{path}.lock").unlink(missing_ok=True)
            self.padded += states.shape[0]
            yield states, k_ids, k_lp
