"""Why a served drafter is not fully accepted: the contract it was trained under against the
one it is served under, each difference tried alone.

The causes users of DFlash trainers lose days to, in the order tried: target layer ids
(often off by one between the extractor's and the engine's conventions), the mask token,
the block size (num_speculative_tokens), the rotary settings; then features that are not
this target's at those layers. Each candidate fix is applied to the served drafter alone
and the prompts decoded again; the first that restores full acceptance is the cause. A
layer shift is also tried where the ids agree: a fault in the extraction itself (states of
layer i - 1 stored as layer i) looks the same from the export.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch

from ..hidden.capture import LayerOutputs, text_decoder


@dataclass(frozen=True)
class Contract:
    """What decoding must match: the layers the features come from, the mask token, the
    block size and the drafter's rotary parameters."""

    layer_ids: list[int]
    mask_id: int
    block_size: int
    rope: dict

    @classmethod
    def served(cls, drafter, block_size: int) -> "Contract":
        return cls(list(drafter.target_layer_ids), int(drafter.mask_token_id), block_size,
                   dict(drafter.config.rope_parameters or {}))

    def differences(self, served: "Contract") -> dict[str, str]:
        """What differs, by part ("layers", "mask", "block", "rope"), in the words the user reads."""
        out = {}
        if served.layer_ids != self.layer_ids:
            shift = {t - s for t, s in zip(self.layer_ids, served.layer_ids)}
            how = f"shifted by {shift.pop():+d}" if len(shift) == 1 and len(self.layer_ids) == len(served.layer_ids) \
                else "different"
            out["layers"] = (f"target layer ids {how}: the features were captured at layers {self.layer_ids}, "
                             f"the export reads {served.layer_ids}")
        if served.mask_id != self.mask_id:
            out["mask"] = f"mask token: trained with id {self.mask_id}, the export says {served.mask_id}"
        if served.block_size != self.block_size:
            out["block"] = (f"block size: trained with blocks of {self.block_size}, served with {served.block_size} "
                            f"(vLLM num_speculative_tokens must be {self.block_size - 1}, SGLang draft tokens "
                            f"{self.block_size})")
        keys = sorted(k for k in set(self.rope) | set(served.rope) if self.rope.get(k) != served.rope.get(k))
        if keys:
            out["rope"] = "rotary settings: " + ", ".join(f"{k} trained {self.rope.get(k)!r}, served "
                                                          f"{served.rope.get(k)!r}" for k in keys)
        return out


@dataclass(frozen=True)
class Fix:
    cause: str  # what the user reads
    drafter: object  # the served drafter with this one thing changed
    block_size: int


def _with(drafter, **attrs):
    d = copy.copy(drafter)  # shares the weights; only the attributes the decoders read change
    for k, v in attrs.items():
        setattr(d, k, v)
    return d


def _with_rope(drafter, rope: dict):
    config = copy.deepcopy(drafter.config)
    config.rope_parameters = dict(rope)
    rebuilt = type(drafter)(config).to(next(drafter.parameters()).device, next(drafter.parameters()).dtype)
    rebuilt.load_state_dict(drafter.state_dict())
    return rebuilt.eval()


def _shifted(ids: list[int], by: int, num_layers: int) -> list[int] | None:
    moved = [i + by for i in ids]
    return moved if all(0 <= i < num_layers for i in moved) else None


def candidate_fixes(drafter, trained: Contract, served: Contract, num_layers: int) -> list[Fix]:
    differ = trained.differences(served)
    fixes = []
    if "layers" in differ:
        fixes.append(Fix(differ["layers"], _with(drafter, target_layer_ids=trained.layer_ids), served.block_size))
    else:
        for by in (-1, 1):
            ids = _shifted(served.layer_ids, by, num_layers)
            if ids is not None:
                fixes.append(Fix(f"target layer ids shifted by one between extraction and decoding: the drafter "
                                 f"was trained on the states of layers {ids} (as the decoder numbers them), the "
                                 f"export reads {served.layer_ids}", _with(drafter, target_layer_ids=ids),
                                 served.block_size))
    if "mask" in differ:
        fixes.append(Fix(differ["mask"], _with(drafter, mask_token_id=trained.mask_id), served.block_size))
    if "block" in differ:
        fixes.append(Fix(differ["block"], drafter, trained.block_size))
    if "rope" in differ:
        fixes.append(Fix(differ["rope"], _with_rope(drafter, trained.rope), served.block_size))
    return fixes


def diagnose(fixes: list[Fix], decode: Callable[[object, int], bool]) -> Fix | None:
    """The first fix under which `decode(drafter, block_size)` accepts every block."""
    for fix in fixes:
        if decode(fix.drafter, fix.block_size):
            return fix
    return None


@torch.inference_mode()
def feature_error(target, seqs: list, layer_ids: list[int]) -> float:
    """RMS of the difference between the states trained on and what the decoder's hooks read
    of this target at `layer_ids` for the same tokens, relative to the states' RMS: bf16
    storage rounding (about 0.003) when they are the same states."""
    base = text_decoder(target)
    diff = total = 0.0
    with LayerOutputs(target, layer_ids) as states:
        for s in seqs:
            base(input_ids=s.input_ids.long()[None].to(target.device), use_cache=False)
            live = states.features()[0].float().cpu()
            stored = s.context.float()
            diff += float((live - stored).pow(2).sum())
            total += float(stored.pow(2).sum())
    return (diff / max(total, 1e-12)) ** 0.5


def layers_stored(target, seqs: list, layer_ids: list[int], num_layers: int, error: float) -> list[int] | None:
    """The layers whose states were stored as `layer_ids`, when a shift by one explains them
    far better than `layer_ids` themselves (`error`, theirs). Relative, not a fixed bound:
    in a tiny random target neighbouring layers differ by a few percent, in a real one by
    far more, and bf16 storage rounds by a fraction of a percent either way."""
    best, best_error = None, error / 2
    for by in (-1, 1):
        ids = _shifted(layer_ids, by, num_layers)
        if ids is not None and (e := feature_error(target, seqs, ids)) < best_error:
            best, best_error = ids, e
    return best
