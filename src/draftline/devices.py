"""Which device a stage computes on: this process's GPU when CUDA has one, else the CPU.

Every stage that runs the target or the drafter (the in-process regeneration backend,
extract, train, benchmark) asks here, so one machine decides alike for all of them. Under
torchrun each process takes the GPU of its local rank, which the caller passes
(`distributed.local_rank()`: the one module that reads torchrun's environment).
`draftline --device` (`cpu`, `cuda`, `cuda:1`) overrides the choice, e.g. to reproduce a
CPU run on a GPU machine.
"""

from __future__ import annotations

import torch


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
