"""A stand-in for the `vllm` package where it cannot run (no GPU, not installed): its `LLM`
records the engine arguments it was given and, per request, writes the file vLLM's
`ExampleHiddenStatesConnector` writes (vllm 0.25-0.33,
vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py):

- `<shared_storage_path>/<request id>.safetensors` with `hidden_states` [T, n, hidden] in
  the model dtype (bf16 here), one column per `eagle_aux_hidden_state_layer_ids` entry in
  that order, and `token_ids` [T] int64, the prompt's;
- `<file>.lock`, created and locked (LOCK_EX) before the request returns and released by
  the writer thread once the file is complete, so a reader that opens the file as soon as
  `generate` returns must wait on the lock;
- `kv_transfer_params = {"hidden_states_path": <file>}` on each request's output, in prompt
  order.

Layer id k counts the embedding output as 0: id k >= 1 is the output of decoder layer
k - 1, before the final norm (vLLM's aux hidden states), computed here by the real model
in float32 with forward hooks. Like vLLM it refuses a model folder without config.json and
a prompt that leaves no room for the sampled token.

    install(monkeypatch) -> the module, put in sys.modules["vllm"] for the test
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import types
from pathlib import Path

import torch
from safetensors.torch import save_file

WRITE_DELAY_S = 0.05  # the writer thread's lag: long enough that an unlocked read would see no file


class SamplingParams:
    def __init__(self, max_tokens: int = 16, **kwargs):
        self.max_tokens, self.kwargs = max_tokens, kwargs


class LLM:
    made: list[dict] = []  # every engine's kwargs, in order (reset by install)
    written: dict[str, tuple[list[int], torch.Tensor]] = {}  # file path -> (token_ids, hidden_states)
    zeros = False  # write all-zero states, as vLLM < 0.25 did for hybrid targets

    def __init__(self, **kwargs):
        LLM.made.append(kwargs)
        self.kwargs = kwargs
        model = Path(kwargs["model"])
        if not (model / "config.json").exists():  # what vLLM's config loading says, in short
            raise ValueError(f"Invalid repository ID or local directory specified: '{model}'")
        from draftline.target.load import load_model

        self.model = load_model(model)
        self.layer_ids = kwargs["speculative_config"]["draft_model_config"]["hf_config"][
            "eagle_aux_hidden_state_layer_ids"]
        self.storage = Path(kwargs["kv_transfer_config"]["kv_connector_extra_config"]["shared_storage_path"])
        self.requests = 0
        self.writers: list[threading.Thread] = []

    def generate(self, prompts, sampling: SamplingParams, use_tqdm=True):
        outs = []
        for prompt in prompts:
            ids = list(prompt["prompt_token_ids"])
            if len(ids) + sampling.max_tokens > self.kwargs["max_model_len"]:
                raise ValueError(f"The decoder prompt (length {len(ids)}) plus the number of requested output "
                                 f"tokens (at least 1) is longer than the maximum model length of "
                                 f"{self.kwargs['max_model_len']}.")
            req = str(self.requests)
            self.requests += 1
            path = str(self.storage / f"{req}.safetensors")
            lock = os.open(f"{path}.lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock, fcntl.LOCK_EX)
            states = self._states(ids)
            LLM.written[path] = (ids, states)
            t = threading.Thread(target=_write, args=(path, states, torch.tensor(ids), lock))
            t.start()
            self.writers.append(t)
            outs.append(types.SimpleNamespace(request_id=req, prompt_token_ids=ids,
                                              kv_transfer_params={"hidden_states_path": path}))
        return outs

    @torch.no_grad()
    def _states(self, ids: list[int]) -> torch.Tensor:
        layers = self.model.get_decoder().layers
        got: dict[int, torch.Tensor] = {}
        hooks = [layers[k - 1].register_forward_hook(
            lambda m, a, o, k=k: got.__setitem__(k, (o[0] if isinstance(o, tuple) else o)[0]))
            for k in self.layer_ids]
        try:
            self.model(input_ids=torch.tensor([ids]))
        finally:
            for h in hooks:
                h.remove()
        states = torch.stack([got[k] for k in self.layer_ids], 1).to(torch.bfloat16).contiguous()
        return torch.zeros_like(states) if LLM.zeros else states


def _write(path: str, states: torch.Tensor, token_ids: torch.Tensor, lock: int) -> None:
    try:
        time.sleep(WRITE_DELAY_S)
        save_file({"hidden_states": states, "token_ids": token_ids.to(torch.int64)}, path)
    finally:
        os.close(lock)  # releases LOCK_EX: readers waiting on LOCK_SH go on


def install(monkeypatch) -> types.ModuleType:
    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams
    LLM.made, LLM.written, LLM.zeros = [], {}, False
    monkeypatch.setitem(__import__("sys").modules, "vllm", module)
    return module
