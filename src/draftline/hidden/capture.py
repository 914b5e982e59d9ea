"""Run the target over tokenized rows and keep the hidden states the drafter needs.

Calls the base model (no LM head): extraction must not compute 49K-wide logits it then
throws away. Rows are sorted by length and batched up to a token budget, right-padded
(with a causal model, padding on the right never changes the real tokens' states).
"""

from __future__ import annotations

import time

import torch

from ..progress import bar
from .features import context_features
from .store import ShardWriter


def batches_by_length(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out, cur = [], []
    for i in order:
        width = max([lengths[j] for j in cur] + [lengths[i]])
        if cur and width * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


@torch.inference_mode()
def extract(model, rows: list[dict], layer_ids: list[int], writer: ShardWriter, batch_tokens: int,
            pad_id: int) -> dict:
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    lengths = [len(r["input_ids"]) for r in rows]
    batches = batches_by_length(lengths, batch_tokens)
    pb = bar(sum(lengths), "extract", unit="tok")
    t0 = time.perf_counter()
    padded = 0
    for b in batches:
        width = max(lengths[i] for i in b)
        ids = torch.full((len(b), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(b), width), dtype=torch.long)
        for j, i in enumerate(b):
            ids[j, : lengths[i]] = torch.tensor(rows[i]["input_ids"])
            attn[j, : lengths[i]] = 1
        padded += ids.numel()
        out = base(input_ids=ids.to(model.device), attention_mask=attn.to(model.device),
                   output_hidden_states=True, use_cache=False)
        # One copy per batch off the GPU (the shards are written from host memory), in the
        # stored dtype: half the bytes of float32 over the bus.
        ctx = context_features(out.hidden_states, layer_ids).to("cpu", torch.bfloat16)
        final = out.last_hidden_state.to("cpu", torch.bfloat16)  # after the final norm: lm_head(final) = the logits
        for j, i in enumerate(b):
            n = lengths[i]
            writer.add(rows[i]["id"], rows[i]["split"], ctx[j, :n], final[j, :n],
                       torch.tensor(rows[i]["input_ids"]), torch.tensor(rows[i]["loss_mask"]))
        pb.update(sum(lengths[i] for i in b))
    pb.close()
    writer.close()
    elapsed = time.perf_counter() - t0
    total = sum(lengths)
    return {"rows": len(rows), "tokens": total, "padding_fraction": round(1 - total / max(padded, 1), 4),
            "seconds": round(elapsed, 2), "tokens_per_second": round(total / max(elapsed, 1e-9), 1),
            "shards": len(writer.shards)}
