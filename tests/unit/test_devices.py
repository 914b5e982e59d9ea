"""compute_device: the GPU when CUDA has one (the caller's local rank's under torchrun), else the CPU;
`draftline --device` overrides. target_max_memory: under torchrun with a device map, each rank
loads the target over its own GPUs, in extract and in train's online features alike."""

from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

from draftline.cli import main
from draftline.config.extract import ExtractParams
from draftline.config.target import TargetParams
from draftline.config.train import TrainParams
from draftline.devices import DeviceError, compute_device, rank_max_memory, target_max_memory
from draftline.distributed import World, local_rank
from draftline.drafter.online import online_rows
from draftline.hidden.plan import Record
from draftline.hidden.producers import producer
from draftline.target import load

GIB = 1 << 30


def _gpu_memory(i: int) -> int:
    return (80 + i) * GIB  # distinct sizes: a GPU given to the wrong rank shows


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


def test_each_rank_of_a_node_spreads_the_target_over_its_own_gpus():
    assert rank_max_memory(0, 2, 4, _gpu_memory) == {0: 80 * GIB, 1: 81 * GIB, 2: 0, 3: 0}
    assert rank_max_memory(1, 2, 4, _gpu_memory) == {0: 0, 1: 0, 2: 82 * GIB, 3: 83 * GIB}
    # 8 GPUs over 3 ranks: 2 each, the last two GPUs left to no rank
    assert rank_max_memory(2, 3, 8, _gpu_memory) == {**dict.fromkeys(range(8), 0), 4: 84 * GIB, 5: 85 * GIB}
    with pytest.raises(DeviceError, match="at least one GPU per rank"):
        rank_max_memory(0, 4, 2, _gpu_memory)


def test_one_process_a_cpu_or_no_device_map_keeps_accelerates_placement():
    cuda1 = torch.device("cuda", 1)
    assert target_max_memory("auto", World(device=torch.device("cuda", 0))) is None
    assert target_max_memory(None, World(1, 2, 1, 2, cuda1)) is None
    assert target_max_memory("auto", World(1, 2, 1, 2, torch.device("cpu"))) is None


class _Loaded(Exception):
    """The stub loader's stop: what it was asked for is all the test reads."""


@pytest.mark.parametrize("rank", [0, 1])
def test_online_features_place_the_target_as_extraction_does(monkeypatch, tmp_path, rank):
    """Local rank `rank` of 2 on a 4-GPU node, `--target-device-map auto`. No GPU runs here:
    CUDA's GPU count and sizes are stubbed, and the loader records what each path asks for."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=_gpu_memory(i)))
    asked = []

    def load_model(model_dir, dtype, device, device_map=None, max_memory=None):
        asked.append((device, device_map, max_memory))
        raise _Loaded

    monkeypatch.setattr(load, "load_model", load_model)
    world = World(rank, 2, rank, 2, torch.device("cuda", rank))
    params = SimpleNamespace(train=TrainParams(), extract=ExtractParams(), target=TargetParams())
    info = SimpleNamespace(hidden_size=64, target_layer_ids=[1, 2], dtype="bfloat16", eos_token_ids=[0])
    with pytest.raises(_Loaded):
        producer(params, info, tmp_path, world.device, "auto", "bfloat16", Record(64, 2, "final"), world, longest=8)
    with pytest.raises(_Loaded):
        online_rows(params, tmp_path, info, tmp_path / "tokens.parquet", world, "auto")
    extract, online = asked
    assert online == extract == (world.device, "auto", rank_max_memory(rank, 2, 4, _gpu_memory))
