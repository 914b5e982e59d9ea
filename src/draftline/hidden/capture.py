"""Run the target over a batch of rows and keep only what the drafter's training reads.

Forward hooks on the decoder layers at `target_layer_ids` take their outputs (what
transformers reports as `hidden_states[i + 1]`); no other layer's states are kept. The
final state (after the final norm) or the teacher's top-k come from the base model's
output; with no teacher stored the forward stops after the deepest captured layer, so
the layers above it never run. The LM head never runs on the whole vocabulary at once:
its logits are taken in row chunks.

The benchmark's decoders read the drafter's context features through the same hooks
(`LayerOutputs`), so the drafter is served exactly what it was trained on, and neither asks
the target for every layer's states (`output_hidden_states`: 0.67 MB a token on a 27B
target, where the drafter reads a few layers).

Rows are right-padded (with a causal model, padding on the right never changes the real
tokens' states).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only: the benchmark's decoders import this module without the plan
    from .plan import Record

HEAD_ROWS = 1024  # LM-head rows per chunk: 1024 x 248K fp32 logits is 1 GB


def right_padded(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (ids, attention mask) [b, longest], padded on the right."""
    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for j, x in enumerate(seqs):
        ids[j, : len(x)] = torch.tensor(x)
        attn[j, : len(x)] = 1
    return ids, attn


class _Stop(Exception):
    """Raised by the deepest hook when nothing above it is needed."""


def decoder_layers(base) -> torch.nn.ModuleList:
    for name in ("layers", "h", "blocks"):
        if isinstance(getattr(base, name, None), torch.nn.ModuleList):
            return getattr(base, name)
    raise ValueError(f"{type(base).__name__} has no list of decoder layers (layers, h or blocks) to hook")


def text_decoder(model) -> torch.nn.Module:
    """The decoder stack of a causal LM (a multimodal wrapper's text model)."""
    return model.get_decoder() if hasattr(model, "get_decoder") else model.model


class LayerOutputs:
    """Forward hooks on `model`'s decoder layers `layer_ids` keeping each one's output from
    the last forward that ran them; `stop_at`: the layer after which the forward is cut short.

    The hooks see every forward through those layers, whoever calls it: take the outputs
    right after the pass they belong to. The last layer's is its own output, as extraction
    stores it, where transformers' `hidden_states[-1]` is the final norm's."""

    def __init__(self, model, layer_ids: list[int], stop_at: int | None = None):
        self.layer_ids, self._stop_at = list(layer_ids), stop_at
        layers = decoder_layers(text_decoder(model))
        self._got: dict[int, torch.Tensor] = {}
        self._hooks = [layers[i].register_forward_hook(self._hook(i)) for i in sorted(set(self.layer_ids))]

    def _hook(self, i: int):
        def keep(module, args, output):
            self._got[i] = output[0] if isinstance(output, tuple) else output
            if i == self._stop_at:
                raise _Stop
        return keep

    def clear(self) -> None:
        self._got.clear()

    def take(self, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
        """The kept outputs in `layer_ids` order (cast one by one to `dtype`), then forgotten."""
        parts = [self._got[i] if dtype is None else self._got[i].to(dtype) for i in self.layer_ids]
        self._got.clear()
        return parts

    def features(self) -> torch.Tensor:
        """[..., T, len(layer_ids) * hidden]: the drafter's context features, in the model's
        dtype, side by side in `layer_ids` order."""
        return torch.cat(self.take(), dim=-1)

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        self.clear()

    def __enter__(self) -> LayerOutputs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Capture:
    """capture(input_ids, attention_mask) -> (states [b, T, C] bf16, top-k ids, top-k logprobs)."""

    def __init__(self, model, layer_ids: list[int], record: Record):
        self.model, self.layer_ids, self.record = model, list(layer_ids), record
        self.base = text_decoder(model)
        self.head = model.get_output_embeddings()
        self._outputs = LayerOutputs(model, self.layer_ids, max(self.layer_ids) if record.teacher == "none" else None)

    def close(self) -> None:
        self._outputs.close()

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        self._outputs.clear()  # nothing from an earlier forward
        dev = self.model.device
        final = None
        try:
            out = self.base(input_ids=input_ids.to(dev), attention_mask=attention_mask.to(dev), use_cache=False)
            final = out.last_hidden_state  # after the final norm: lm_head(final) = the logits
        except _Stop:
            pass
        parts = self._outputs.take(torch.bfloat16)
        if self.record.teacher == "final":
            parts.append(final.to(torch.bfloat16))
        states = torch.cat(parts, dim=-1)
        if self.record.teacher != "top_k":
            return states, None, None
        ids, logp = self.top_k(final.reshape(-1, final.shape[-1]))
        b, t = input_ids.shape
        return states, ids.view(b, t, -1), logp.view(b, t, -1)

    def top_k(self, final: torch.Tensor):
        return top_k_logprobs(self.head, final, self.record.top_k)


def top_k_logprobs(head, final: torch.Tensor, k: int):
    """The teacher's k most likely tokens and their log-probabilities over the whole
    vocabulary, from the final state at the model's own precision (before bf16 storage)."""
    ids = torch.empty(final.shape[0], k, dtype=torch.int32, device=final.device)
    logp = torch.empty(final.shape[0], k, dtype=torch.float32, device=final.device)
    for s in range(0, final.shape[0], HEAD_ROWS):
        logits = head(final[s : s + HEAD_ROWS]).float()
        top = logits.topk(k, dim=-1)
        logp[s : s + HEAD_ROWS] = top.values - torch.logsumexp(logits, -1, keepdim=True)
        ids[s : s + HEAD_ROWS] = top.indices.to(torch.int32)
    return ids, logp
