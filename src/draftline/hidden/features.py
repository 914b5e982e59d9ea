"""The drafter's context features at decoding time: the target's hidden states at
`target_layer_ids`, concatenated along the hidden axis. Extraction takes the same states
with hooks on those layers (capture.py); a test holds the two equal, so the drafter is
trained on what it is served."""

from __future__ import annotations

import torch


def context_features(hidden_states, layer_ids: list[int]) -> torch.Tensor:
    """hidden_states: a transformers output's `hidden_states` (index 0 is the embedding
    output, layer l's output is index l + 1) -> [..., T, len(layer_ids) * hidden]."""
    return torch.cat([hidden_states[layer + 1] for layer in layer_ids], dim=-1)
