"""Run the target over a batch of rows and keep only what the drafter's training reads.

Forward hooks on the decoder layers at `target_layer_ids` take their outputs (what
transformers reports as `hidden_states[i + 1]`); no other layer's states are kept. The
final state (after the final norm) or the teacher's top-k come from the base model's
output; with no teacher stored the forward stops after the deepest captured layer, so
the layers above it never run. The LM head never runs on the whole vocabulary at once:
its logits are taken in row chunks.

Rows are right-padded (with a causal model, padding on the right never changes the real
tokens' states).
"""

from __future__ import annotations

import torch

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
    raise ValueError(f"extract: {type(base).__name__} has no list of decoder layers")


class Capture:
    """capture(input_ids, attention_mask) -> (states [b, T, C] bf16, top-k ids, top-k logprobs)."""

    def __init__(self, model, layer_ids: list[int], record: Record):
        self.model, self.layer_ids, self.record = model, list(layer_ids), record
        self.base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.head = model.get_output_embeddings()
        layers = decoder_layers(self.base)
        self._got: dict[int, torch.Tensor] = {}
        self._stop_at = max(self.layer_ids) if record.teacher == "none" else None
        self._hooks = [layers[i].register_forward_hook(self._hook(i)) for i in sorted(set(self.layer_ids))]

    def _hook(self, i: int):
        def keep(module, args, output):
            self._got[i] = output[0] if isinstance(output, tuple) else output
            if i == self._stop_at:
                raise _Stop
        return keep

    def close(self) -> None:
        for h in self._hooks:
            h.remove()

    @torch.inference_mode()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        self._got.clear()
        dev = self.model.device
        final = None
        try:
            out = self.base(input_ids=input_ids.to(dev), attention_mask=attention_mask.to(dev), use_cache=False)
            final = out.last_hidden_state  # after the final norm: lm_head(final) = the logits
        except _Stop:
            pass
        parts = [self._got[i].to(torch.bfloat16) for i in self.layer_ids]
        if self.record.teacher == "final":
            parts.append(final.to(torch.bfloat16))
        states = torch.cat(parts, dim=-1)
        self._got.clear()
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
