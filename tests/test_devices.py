"""compute_device: the GPU when CUDA has one, else the CPU; DRAFTLINE_DEVICE overrides."""

import pytest
import torch

from draftline.devices import DeviceError, compute_device


def test_default_is_cuda_when_available_else_cpu(monkeypatch):
    monkeypatch.delenv("DRAFTLINE_DEVICE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert compute_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_override_names_the_device(monkeypatch):
    monkeypatch.setenv("DRAFTLINE_DEVICE", "cpu")
    assert compute_device() == torch.device("cpu")


@pytest.mark.parametrize("value", ["gpu0", "cuda:x"])
def test_bad_override_is_named(monkeypatch, value):
    monkeypatch.setenv("DRAFTLINE_DEVICE", value)
    with pytest.raises(DeviceError, match="DRAFTLINE_DEVICE"):
        compute_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_override_without_cuda_is_refused(monkeypatch):
    monkeypatch.setenv("DRAFTLINE_DEVICE", "cuda")
    with pytest.raises(DeviceError, match="not available"):
        compute_device()
