"""Which device a stage computes on: this process's GPU when CUDA has one, else the CPU.

Every stage that runs the target or the drafter (the in-process regeneration backend,
extract, train, benchmark) asks here, so one machine decides alike for all of them. Under
torchrun each process takes the GPU of its LOCAL_RANK. `DRAFTLINE_DEVICE` (`cpu`, `cuda`,
`cuda:1`) overrides the choice, e.g. to reproduce a CPU run on a GPU machine.
"""

from __future__ import annotations

import os

import torch


class DeviceError(RuntimeError):
    pass


def compute_device() -> torch.device:
    forced = os.environ.get("DRAFTLINE_DEVICE")
    if forced:
        try:
            device = torch.device(forced)
        except RuntimeError:
            raise DeviceError(f"DRAFTLINE_DEVICE: {forced!r} is not a torch device (cpu, cuda, cuda:N)") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise DeviceError(f"DRAFTLINE_DEVICE={forced}, but CUDA is not available here")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")
