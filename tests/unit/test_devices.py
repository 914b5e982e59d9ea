"""compute_device: the GPU when CUDA has one (the caller's local rank's under torchrun), else the CPU;
`draftline --device` overrides."""

import pytest
import torch
from click.testing import CliRunner

from draftline.cli import main
from draftline.devices import DeviceError, compute_device
from draftline.distributed import local_rank


def test_default_is_cuda_when_available_else_cpu():
    assert compute_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_the_local_rank_comes_from_the_caller_not_the_environment(monkeypatch):
    """Under torchrun the distributed layer reads LOCAL_RANK; devices.py reads nothing."""
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert local_rank() == 3
    if torch.cuda.is_available():
        assert compute_device() == torch.device("cuda", 0)
        assert compute_device(local_rank=local_rank()) == torch.device("cuda", 3)
        assert compute_device("cuda", local_rank()) == torch.device("cuda", 3)
    else:
        assert compute_device(local_rank=local_rank()) == torch.device("cpu")
    monkeypatch.delenv("LOCAL_RANK")
    assert local_rank() == 0


def test_override_names_the_device():
    assert compute_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("value", ["gpu0", "cuda:x"])
def test_bad_override_is_named(value):
    with pytest.raises(DeviceError, match="--device"):
        compute_device(value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_override_without_cuda_is_refused():
    with pytest.raises(DeviceError, match="not available"):
        compute_device("cuda")


def test_the_environment_variable_reaches_the_option(monkeypatch):
    """DRAFTLINE_DEVICE is the --device option's envvar: the stage gets it as a setting."""
    seen = {}

    @main.command("probe", hidden=True)
    def probe():
        import click

        seen["device"] = click.get_current_context().obj.device

    try:
        result = CliRunner().invoke(main, ["probe"], env={"DRAFTLINE_DEVICE": "cpu"})
        assert result.exit_code == 0, result.output
        assert seen["device"] == "cpu"
    finally:
        main.commands.pop("probe", None)
