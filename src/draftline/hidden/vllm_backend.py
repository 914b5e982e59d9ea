"""`extract.backend: vllm`: vLLM runs the target (tensor parallel across a node's GPUs),
its `extract_hidden_states` method writes one file per request, and each shard's files
are converted (vllm_files.py) and deleted as soon as the shard is written, so the
per-request files never hold more than one shard's worth. Needs the `gpu` extra; nothing
here is imported on the CPU path.

The GPU check compares it with the transformers path on the tiny Qwen3.6 layout, every
row within bf16 tolerance (tests/vllm_parity.py, `python bench/gpu_check.py --stages ''
--vllm`). That recompute is the check's, not the stage's: vLLM holds the GPUs' memory while
it runs, so the target does not fit a second time beside it. An MLA target is refused
before vLLM starts (docs/real-targets.md).

    .venv/bin/python -m pytest tests/model/test_vllm_producer.py    # on CPU, a stand-in vllm
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..target.layout import norm_offset
from ..target.load import load_config, model_path
from ..target.weights import Tensors, final_norm, load_io_weights
from .plan import Record
from .vllm_files import FinalNorm, VllmFileError, convert, vllm_layer_ids

if TYPE_CHECKING:  # annotations only
    from ..config.extract import ExtractParams
    from ..target.info import TargetInfo

# Each request samples one token (max_tokens=1) and vLLM refuses a prompt that leaves no
# room for it, so the engine's length is the plan's longest row plus this.
SAMPLED_TOKENS = 1

MLA_REFUSED = ("extract.backend: vllm: MLA targets ({arch}) are not proven with vLLM's hidden-states connector "
               "(vLLM 0.33 raises 'MLA verifiers are unsupported'); use extract.backend: transformers")


class VllmBackendError(RuntimeError):
    """The vLLM backend will not run this target: one line, before vLLM starts."""


def check_target(info: TargetInfo) -> None:
    """Refuse what no GPU run has shown to work: vLLM's connector cannot always isolate its
    hidden-states cache group beside MLA layers (Kimi K2.x, DeepSeek-V3)."""
    if info.attention == "mla":
        raise VllmBackendError(MLA_REFUSED.format(arch=info.architecture))


def engine_args(model: Path, layer_ids: list[int], num_layers: int, teacher: str, tp: int, storage: Path,
                max_model_len: int, trust_remote_code: bool) -> dict:
    """vLLM's documented settings for hidden-state extraction (chunked prefill off), for
    `model`, the folder that holds the target's files (a pointer resolved)."""
    return {
        "model": str(model),
        "tensor_parallel_size": tp,
        "trust_remote_code": trust_remote_code,
        # Without it vLLM takes the config's context (262K for Qwen3.6), and with chunked prefill
        # off it sizes one batch's activations to that many tokens.
        "max_model_len": max_model_len,
        "enable_chunked_prefill": False,
        # The rows are token ids: no vision tower is loaded or profiled (Qwen3.6, Kimi K2.x).
        "language_model_only": True,
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
    """`longest`: the longest row this process will run (the plan's); `trust_remote_code`:
    target.trust_remote_code."""

    def __init__(self, model_dir: Path, info: TargetInfo, record: Record, p: ExtractParams, *, longest: int,
                 trust_remote_code: bool):
        check_target(info)  # before vLLM is imported: it takes minutes to start
        from vllm import LLM, SamplingParams

        self.info, self.record = info, record
        self.storage = Path(p.vllm_storage)
        self.storage.mkdir(parents=True, exist_ok=True)
        self.llm = LLM(**engine_args(model_path(model_dir), info.target_layer_ids, info.num_hidden_layers,
                                     record.teacher, p.vllm_tensor_parallel_size, self.storage,
                                     longest + SAMPLED_TOKENS, trust_remote_code))
        self.sampling = SamplingParams(max_tokens=SAMPLED_TOKENS)
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
                                    "ExampleHiddenStatesConnector configured (the gpu extra's vllm)?")
            path = Path(path)
            try:
                states, k_ids, k_lp = convert(path, row, self.info.target_layer_ids, self.info.num_hidden_layers,
                                              self.record, self.norm, self.head)
            finally:
                path.unlink(missing_ok=True)
                Path(f"{path}.lock").unlink(missing_ok=True)
            self.padded += states.shape[0]
            yield states, k_ids, k_lp
