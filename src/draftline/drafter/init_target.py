"""`train.init: target`: start the drafter from the target's own layers, whatever they are.

The drafter's layers are z-lab's Qwen3 layers (attention over context + block, a SwiGLU
MLP). A plain dense target's layer right after the deepest captured one was trained to read
that layer's output, so copying it is a prior worth more than a random start on small data
(bench/RESULTS.md). The real targets' layers are not all plain, so each part is taken where
it fits and the rest starts fresh, per drafter layer i, from target layer
`deepest + 1 + i` (never a captured layer or one before it; past the last layer, fresh):

- norms: always (Qwen3.5/3.6's (1 + w) norms converted);
- attention: the layer's own when it is full attention of the drafter's shape (a gated
  full-attention layer gives its query half: Qwen3.6's q_proj holds query and output gate
  per head); else the nearest full-attention layer of that shape (Gated-DeltaNet
  linear-attention layers have no q/k/v to copy); else fresh (MLA: no plain q/k/v anywhere);
- MLP: the layer's dense MLP of the drafter's width, else its shared expert of that width
  (MoE), else fresh.

The stage prints one line per drafter layer saying where each part came from.
"""

from __future__ import annotations

import torch

from ..target.layout import FULL, norm_offset
from ..target.weights import Tensors, final_norm, read_layer
from .model import DrafterError

NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight")
ATTENTION = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "self_attn.o_proj.weight")
QK_NORMS = ("self_attn.q_norm.weight", "self_attn.k_norm.weight")
MLP = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
SHARED = tuple(n.replace("mlp.", "mlp.shared_experts.") for n in MLP)


def target_init_layers(num_target_layers: int, layer_ids: list[int], num_layers: int) -> list[int | None]:
    """The target layer each drafter layer starts from: those right after the deepest captured
    layer (they were trained to read its output); None past the target's last layer."""
    start = max(layer_ids) + 1
    return [start + i if start + i < num_target_layers else None for i in range(num_layers)]


def _query_half(q: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """A gated attention's q_proj [heads * 2 * head_dim, hidden] (per head: query, then gate)
    -> the query rows."""
    return q.view(heads, 2, head_dim, -1)[:, 0].reshape(heads * head_dim, -1)


def _attention(weights: dict, shapes: dict, heads: int, head_dim: int, offset: float) -> dict | None:
    """The layer's attention tensors in the drafter's shapes, or None when it has none that fit."""
    if not all(n in weights for n in ATTENTION):
        return None
    out = {n: weights[n] for n in ATTENTION}
    q = out["self_attn.q_proj.weight"]
    if q.shape[0] == 2 * shapes["self_attn.q_proj.weight"][0] and q.shape[1] == shapes["self_attn.q_proj.weight"][1]:
        out["self_attn.q_proj.weight"] = _query_half(q, heads, head_dim)
    for n in QK_NORMS:
        if n in weights:
            out[n] = weights[n] + offset
    if any(tuple(w.shape) != shapes[n] for n, w in out.items()):
        return None
    return out


def _mlp(weights: dict, shapes: dict) -> tuple[dict | None, str]:
    for names, what in ((MLP, "mlp"), (SHARED, "shared expert")):
        if all(n in weights for n in names):
            out = {m: weights[n] for m, n in zip(MLP, names)}
            if all(tuple(w.shape) == shapes[n] for n, w in out.items()):
                return out, what
    return None, ""


def plan(t: Tensors, info, drafter) -> tuple[list[dict], list[str]]:
    """Per drafter layer, the tensors to copy (drafter name -> tensor), and a line saying
    where each part came from."""
    cfg = drafter.config
    heads, head_dim = int(cfg.num_attention_heads), int(cfg.head_dim)
    offset = norm_offset(info)
    sources = target_init_layers(info.num_hidden_layers, info.target_layer_ids, len(drafter.layers))
    full = [k for k, kind in enumerate(info.layer_types) if kind == FULL]
    out, lines = [], []
    for i, (layer, j) in enumerate(zip(drafter.layers, sources)):
        shapes = {n: tuple(p.shape) for n, p in layer.named_parameters()}
        if j is None:
            out.append({})
            lines.append(f"drafter layer {i}: fresh (no target layer after {info.num_hidden_layers - 1})")
            continue
        weights = read_layer(t, j)
        copy = {n: weights[n] + offset for n in NORMS}
        parts = ["norms"]
        attn = _attention(weights, shapes, heads, head_dim, offset)
        if attn is not None:
            parts.append("attention")
        else:
            # the nearest full-attention layer that fits, later ones first at equal distance
            for k in sorted((k for k in full if k != j), key=lambda k: (abs(k - j), k < j)):
                attn = _attention(read_layer(t, k), shapes, heads, head_dim, offset)
                if attn is not None:
                    parts.append(f"attention of layer {k} (layer {j} is {info.layer_types[j]}"
                                 f"{', mla' if info.attention == 'mla' else ''})")
                    break
            else:
                parts.append(f"fresh attention (no full-attention layer of the drafter's shape: "
                             f"{info.attention}, {info.layer_types[j]})")
        copy |= attn or {}
        mlp, what = _mlp(weights, shapes)
        if mlp is not None:
            copy |= mlp
            parts.append(what)
        else:
            parts.append(f"fresh mlp ({info.mlp_types[j]} layer, no MLP of width {shapes[MLP[0]][0]})")
        out.append(copy)
        lines.append(f"drafter layer {i} <- target layer {j}: " + ", ".join(parts))
    return out, lines


@torch.no_grad()
def init_from_target(drafter, model_dir, info) -> list[str]:
    """Start the drafter as the target's own next layers over its deepest captured state.

    Drafter layer i takes what fits of target layer `target_init_layers(...)[i]` (above), its
    final norm the target's, and `fc` reads only the deepest captured layer (identity block),
    with `hidden_norm` the first copied layer's input norm: so at step 0 the context keys
    and values of the first layer are exactly that target layer's own where its attention
    was copied. Returns the lines saying what came from where.
    """
    t = Tensors(model_dir)
    layers, lines = plan(t, info, drafter)
    for layer, weights in zip(drafter.layers, layers):
        own = dict(layer.named_parameters())
        for name, w in weights.items():
            if own[name].shape != w.shape:
                raise DrafterError(f"init_from_target: {name} is {tuple(w.shape)} in the target, "
                                   f"{tuple(own[name].shape)} in the drafter")
            own[name].copy_(w)
    drafter.norm.weight.copy_(final_norm(t) + norm_offset(info))
    hidden = drafter.norm.weight.shape[0]
    deepest = max(range(len(drafter.target_layer_ids)), key=lambda j: drafter.target_layer_ids[j])
    drafter.fc.weight.zero_()
    drafter.fc.weight[:, deepest * hidden:(deepest + 1) * hidden] = torch.eye(hidden)
    if layers and layers[0]:
        drafter.hidden_norm.weight.copy_(layers[0]["input_layernorm.weight"])
    return lines
