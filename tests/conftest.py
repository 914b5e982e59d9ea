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
    from draftline.config import TargetParams
    from draftline.target import materialize

    out = tmp_path_factory.mktemp("target") / "model"
    materialize(TargetParams(), out)
    return out


@pytest.fixture(scope="session")
def tokenizer(target_dir):
    from draftline.target import load_tokenizer

    return load_tokenizer(target_dir)


@pytest.fixture(scope="session")
def target_model(target_dir):
    from draftline.target import load_model

    return load_model(target_dir)


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
