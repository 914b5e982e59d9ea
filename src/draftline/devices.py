"""Which device a stage computes on: this process's GPU when CUDA has one, else the CPU.

Every stage that runs the target or the drafter (the in-process regeneration backend,
extract, train, benchmark) asks here, so one machine decides alike for all of them. Under
torchrun each process takes the GPU of its local rank, which the caller passes
(`distributed.local_rank()`: the one module that reads torchrun's environment).
`draftline --device` (`cpu`, `cuda`, `cuda:1`) overrides the choice, e.g. to reproduce a
CPU run on a GPU machine.

A target too large for one GPU is loaded with a device map (`--target-device-map auto`); under
torchrun each rank then spreads its copy over its own share of the node's GPUs
(`target_max_memory`), extract's producer and train's online features alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only: devices.py reads no torchrun state itself
    from .distributed import World


class DeviceError(RuntimeError):
    pass


def compute_device(forced: str | None = None, local_rank: int = 0) -> torch.device:
    """`forced`: the --device option; `local_rank`: this process's index on its node."""
    if forced:
        try:
            device = torch.device(forced)
        except RuntimeError:
            raise DeviceError(f"--device: {forced!r} is not a torch device (cpu, cuda, cuda:N)") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise DeviceError(f"--device {forced}, but CUDA is not available here")
        if device.type == "cuda" and device.index is None:  # under torchrun: each rank its own GPU
            device = torch.device("cuda", local_rank)
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def describe(device: torch.device) -> str:
    """The device in words for metrics: a GPU's name, or the CPU's model and threads used."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = "cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name} ({torch.get_num_threads()} threads)"


def target_max_memory(device_map: str | None, world: World) -> dict[int, int] | None:
    """The `max_memory` a rank loads the target with: with a device map under torchrun on
    GPUs, this rank's own GPUs only; else None (accelerate's default, every GPU it sees).
    Without it each rank would spread its own copy of the target over every GPU of the node."""
    if not device_map or world.size <= 1 or world.device.type != "cuda":
        return None
    return rank_max_memory(world.local_rank, world.local_size, torch.cuda.device_count())


def _gpu_memory(i: int) -> int:
    return torch.cuda.get_device_properties(i).total_memory


def rank_max_memory(local_rank: int, local_world: int, gpus: int,
                    gpu_memory: Callable[[int], int] = _gpu_memory) -> dict[int, int]:
    """With a device map, rank r of a node's `local_world` ranks spreads the target over its
    own `gpus // local_world` GPUs only (accelerate places nothing where max_memory is 0).
    `gpu_memory(i)`: GPU i's bytes (a test passes its own: no GPU runs here)."""
    per = gpus // local_world
    if per < 1:
        raise DeviceError(f"{local_world} ranks on this node but {gpus} GPU(s): a device map needs at least "
                          "one GPU per rank")
    mine = range(local_rank * per, (local_rank + 1) * per)
    return {i: (gpu_memory(i) if i in mine else 0) for i in range(gpus)}
