"""compute_device: the GPU when CUDA has one, else the CPU; `draftline --device` overrides."""

import pytest
import torch
from click.testing import CliRunner

from draftline.cli import main
from draftline.devices import DeviceError, compute_device


def test_default_is_cuda_when_available_else_cpu(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert compute_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


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
