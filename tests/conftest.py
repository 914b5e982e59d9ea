"""Shared fixtures: the real embedded target, converted once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DRAFTLINE_NO_PROGRESS", "1")

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def target_dir(tmp_path_factory) -> Path:
    from draftline.config.target import TargetParams
    from draftline.target.materialize import materialize

    out = tmp_path_factory.mktemp("target") / "model"
    materialize(TargetParams(), out)
    return out


@pytest.fixture(scope="session")
def tokenizer(target_dir):
    from draftline.target.load import load_tokenizer

    return load_tokenizer(target_dir)


@pytest.fixture(scope="session")
def target_model(target_dir):
    from draftline.target.load import load_model

    return load_model(target_dir)


TINY_VOCAB, TINY_MASK = 6, 5

# The bare training recipe the training tests are written against (cross-entropy, no
# prompt anchors or teacher shortcuts): params.yaml's recipe is the pipeline's, not theirs.
BARE_TRAIN = dict(prompt_anchors=0, gamma=4.0, loss="ce", kl_temperature=1.0, kl_top_k=None, head_vocab=None,
                  init="random", lr=6e-4, epochs=1, max_steps=None, batch_size=8, eval_every=50, checkpoint_every=50)


def train_params(**overrides):
    from draftline.config.train import TrainParams

    return TrainParams(**{**BARE_TRAIN, **overrides})


@pytest.fixture(scope="session")
def tiny():
    """A 6-token Llama target and a DFlash drafter for it (block 4), both random but fixed:
    small enough that drafts are often right, so acceptance paths of every shape occur."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from draftline.config.drafter import DrafterParams
    from draftline.drafter.model import build_drafter, drafter_config

    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False)
    target = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    with torch.no_grad():  # spread the logits so the distributions are neither flat nor one-hot
        target.lm_head.weight.mul_(8.0)
    d_cfg = drafter_config(cfg, DrafterParams(num_layers=1, block_size=4), [0], TINY_MASK)
    drafter = build_drafter(d_cfg, 1).eval()
    return target, drafter


@pytest.fixture(scope="session")
def llama_servers():
    """Two llama.cpp servers on loopback, each serving the embedded SmolLM2 GGUF."""
    from llama_server import LlamaServer

    servers = [LlamaServer(), LlamaServer()]
    try:
        yield [s.wait() for s in servers]
    finally:
        for s in servers:
            s.stop()
