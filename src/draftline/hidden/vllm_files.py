"""vLLM's hidden-state files, converted into this project's shard rows.

vLLM (the `gpu` extra's, >= 0.25.0) extracts hidden states with its `extract_hidden_states`
speculative method and the `ExampleHiddenStatesConnector`, one safetensors file per request,
`<shared_storage_path>/<request id>.safetensors`, written by a thread after the request
returns, under an exclusive lock on `<file>.lock` until it is complete:
    hidden_states [T, n, hidden]  the model dtype, the n requested layer ids in ascending order
    token_ids     [T] int64       the prompt's tokens
Its layer ids count the embedding output as 0: id k is the residual stream after decoder
layer k - 1 (transformers' `hidden_states[k]`), so the drafter's layer i is id i + 1; id
`num_hidden_layers` is the last layer's output before the final norm, which we apply.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import torch
from safetensors import safe_open

from .capture import top_k_logprobs
from .plan import Record


class VllmFileError(Exception):
    pass


def vllm_layer_ids(layer_ids: list[int], num_layers: int, teacher: str) -> list[int]:
    """The ids to ask vLLM for (`eagle_aux_hidden_state_layer_ids`): unique and ascending,
    the order its files use."""
    ids = {i + 1 for i in layer_ids}
    if teacher != "none":
        ids.add(num_layers)
    return sorted(ids)


class FinalNorm:
    """The target's final RMSNorm, from its weight: vLLM's last id comes before it."""

    def __init__(self, weight: torch.Tensor, eps: float, offset: float = 0.0):
        self.weight, self.eps, self.offset = weight.float(), eps, offset

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * (self.weight.to(x.device) + self.offset)


def read_file(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(hidden_states, token_ids) of one request's file; waits on the `.lock` newer vLLM
    writes beside a file until its writer thread is done with it."""
    lock = Path(f"{path}.lock")
    fd = os.open(lock, os.O_RDONLY) if lock.exists() else None
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)
        with safe_open(str(path), framework="pt") as f:
            return f.get_tensor("hidden_states"), f.get_tensor("token_ids")
    except Exception as e:  # noqa: BLE001 - OSError, a missing key, safetensors' own error type
        raise VllmFileError(f"{path}: not a readable vLLM hidden-states file ({e})") from None
    finally:
        if fd is not None:
            os.close(fd)


def convert(path: Path, row: dict, layer_ids: list[int], num_layers: int, record: Record, norm: FinalNorm,
            head=None):
    """One request's file -> (states [T, C] bf16, top-k ids, top-k logprobs) as the
    transformers backend stores them for `row`."""
    hidden, tokens = read_file(path)
    ids = vllm_layer_ids(layer_ids, num_layers, record.teacher)
    want = torch.tensor(row["input_ids"], dtype=torch.long)
    if tokens.shape != want.shape or not torch.equal(tokens.long(), want):
        raise VllmFileError(f"{path}: its token_ids are not row {row['id']!r}'s input_ids")
    if tuple(hidden.shape) != (want.shape[0], len(ids), record.hidden):
        raise VllmFileError(f"{path}: hidden_states {tuple(hidden.shape)}, expected "
                            f"[{want.shape[0]}, {len(ids)}, {record.hidden}] for layer ids {ids}")
    cols = [hidden[:, ids.index(i + 1)].to(torch.bfloat16) for i in layer_ids]
    final = norm(hidden[:, ids.index(num_layers)]) if record.teacher != "none" else None
    if record.teacher == "final":
        cols.append(final.to(torch.bfloat16))
    states = torch.cat(cols, dim=-1)
    if record.teacher != "top_k":
        return states, None, None
    k_ids, k_lp = top_k_logprobs(head, final.to(head.weight.dtype), record.top_k)
    return states, k_ids, k_lp
