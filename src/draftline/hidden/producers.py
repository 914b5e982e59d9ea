"""What turns a shard's rows into the states the shard stores, per `extract.backend`: a
producer is called with a shard's rows and yields, batch by batch, (states [n, C] bf16,
top-k ids or None, top-k log-probs or None), the rows unpadded and in order.

transformers: this process runs the target (capture.py's hooks), rows batched by length
up to extract.batch_tokens. vllm: vLLM runs it (vllm_backend.py, the `gpu` extra).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..devices import target_max_memory
from ..distributed import World
from .capture import right_padded
from .plan import Record, batches


def producer(params, info, model_dir: Path, device: torch.device, device_map: str | None, dtype: str,
             record: Record, world: World, longest: int):
    """The backend params.extract names, with the target loaded on this rank's device(s);
    `longest`: the longest row this rank will run (vLLM sizes its engine to it)."""
    if params.extract.backend == "vllm":
        from .vllm_backend import VllmProducer

        return VllmProducer(model_dir, info, record, params.extract, longest=longest,
                            trust_remote_code=params.target.trust_remote_code)
    from ..target.load import load_model, load_tokenizer
    from .capture import Capture

    model = load_model(model_dir, dtype, device, device_map, max_memory=target_max_memory(device_map, world))
    tok = load_tokenizer(model_dir)
    pad = tok.pad_token_id if tok.pad_token_id is not None else info.eos_token_ids[0]
    return TransformersProducer(Capture(model, info.target_layer_ids, record), params.extract.batch_tokens, pad)


class TransformersProducer:
    """The target in this process, through `capture` (a capture.Capture); counts the padded
    tokens it ran, for the stage's padding fraction."""

    def __init__(self, capture, batch_tokens: int, pad_id: int):
        self.capture, self.batch_tokens, self.pad_id = capture, batch_tokens, pad_id
        self.padded = 0

    def __call__(self, shard_rows: list[dict]):
        lengths = [len(r["input_ids"]) for r in shard_rows]
        for b in batches(lengths, self.batch_tokens):
            ids, attn = right_padded([shard_rows[i]["input_ids"] for i in b], self.pad_id)
            self.padded += ids.numel()
            states, k_ids, k_lp = self.capture(ids, attn)
            # One copy per batch off the device, in the stored dtype, without the padding.
            keep = attn.bool().to(states.device)
            yield (states[keep].cpu(), None if k_ids is None else k_ids[keep].cpu(),
                   None if k_lp is None else k_lp[keep].cpu())
