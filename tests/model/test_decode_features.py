"""The drafter's context features while decoding come from extraction's hooks on its layers
(hidden/capture.py `LayerOutputs`), never from the target's every-layer `hidden_states`:
on the embedded target and the tiny Qwen3.6 (Gated-DeltaNet hybrid, vision wrapper) and
Kimi-K2.6 (MLA + MoE) layouts, every pass's features equal, bit for bit, what selecting
from `output_hidden_states` gave before, and no pass asks for them.

    .venv/bin/python -m pytest -q tests/model/test_decode_features.py
"""

from __future__ import annotations

import pytest
import torch

from draftline.config.drafter import DrafterParams
from draftline.decode.chain import speculative
from draftline.decode.tree import tree_speculative
from draftline.drafter.model import build_drafter, drafter_config
from draftline.hidden.capture import Capture, LayerOutputs, decoder_layers, text_decoder
from extract_helpers import context_features
from draftline.hidden.plan import Record
from draftline.target.load import load_model


@pytest.fixture(scope="module")
def qwen36(tmp_path_factory):
    from tiny_layouts import qwen36_target

    return load_model(qwen36_target(tmp_path_factory.mktemp("qwen36") / "model", num_layers=8))


@pytest.fixture(scope="module")
def kimi26(tmp_path_factory):
    from tiny_layouts import kimi26_target

    return load_model(kimi26_target(tmp_path_factory.mktemp("kimi26") / "model"))


@pytest.fixture
def checked(monkeypatch):
    """Each target pass during decoding: whether it asked for every layer's states, and its
    hook features compared with `context_features` over those states, which the test turns
    on itself (the reference: what the decoders read before)."""
    asked: list[bool] = []
    compared: list[bool] = []
    last = {}

    def ask_for_all(module, args, kwargs):
        asked.append(bool(kwargs.get("output_hidden_states")))
        return args, {**kwargs, "output_hidden_states": True}

    def keep(module, args, kwargs, out):
        last["hidden_states"] = out.hidden_states

    features = LayerOutputs.features

    def compare(self):
        got = features(self)
        want = context_features(last.pop("hidden_states"), self.layer_ids)
        compared.append(got.dtype == want.dtype and torch.equal(got, want))
        return got

    monkeypatch.setattr(LayerOutputs, "features", compare)

    def watch(target):
        base = target.base_model
        return [base.register_forward_pre_hook(ask_for_all, with_kwargs=True),
                base.register_forward_hook(keep, with_kwargs=True)]

    return watch, asked, compared


def _drafter(target, layer_ids: list[int], mask_id: int):
    dp = DrafterParams(num_layers=1, block_size=4, target_layer_ids=layer_ids)
    return build_drafter(drafter_config(target.config, dp, layer_ids, mask_id), 0).eval()


@pytest.mark.parametrize("name", ["embedded", "qwen36", "kimi26"])
def test_decoding_features_are_the_hooked_layers_bit_for_bit(name, request, checked):
    target = request.getfixturevalue({"embedded": "target_model"}.get(name, name))
    n = target.config.get_text_config().num_hidden_layers
    # Every layer but the last: transformers reports the last one after the final norm (below).
    layer_ids = [1, n - 2]
    vocab = target.get_output_embeddings().weight.shape[0]
    drafter = _drafter(target, layer_ids, vocab - 1)
    watch, asked, compared = checked
    handles = watch(target)
    try:
        ids = torch.randint(0, min(vocab, 5000), (1, 9), generator=torch.Generator().manual_seed(0))
        speculative(drafter, target, ids, 6, [])
        speculative(drafter, target, ids, 6, [], temperature=1.0, gen=torch.Generator().manual_seed(1))
        tree_speculative(drafter, target, ids, 6, [], budget=5)
    finally:
        for h in handles:
            h.remove()
    assert compared and all(compared)  # the prefill's and every verify pass's features
    assert asked and not any(asked)  # prefill, verify and replay passes alike
    hooks = [h for layer in decoder_layers(text_decoder(target)) for h in layer._forward_hooks.values()]
    assert not [h for h in hooks if "LayerOutputs" in h.__qualname__]  # removed after decoding


def test_the_last_layer_is_its_own_output_as_extraction_stores_it(target_model):
    """`hidden_states[-1]` is the final norm's output, not the last layer's: the decoders now
    serve that layer as extraction stores it (the drafter was trained on it)."""
    last = target_model.config.num_hidden_layers - 1
    ids = torch.randint(0, 5000, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        with LayerOutputs(target_model, [last]) as states:
            out = target_model.base_model(ids, output_hidden_states=True)
            served = states.features()
        extract = Capture(target_model, [last], Record(target_model.config.hidden_size, 1, "none"))
        try:
            stored, _, _ = extract(ids, torch.ones_like(ids))
        finally:
            extract.close()
    assert torch.equal(served.to(torch.bfloat16), stored)
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert not torch.equal(served, out.last_hidden_state)

