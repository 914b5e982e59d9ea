"""This process's place in a torchrun run, and the collectives the stages use: NCCL on
GPUs, gloo on CPUs; one process is plain Python, with no process group at all.

    torchrun --nproc_per_node 2 -m draftline extract    # or train
    draftline extract     # extract.processes_per_node: 2: the stage starts torchrun (launch.py)

torchrun describes the run in the environment (WORLD_SIZE, RANK, LOCAL_RANK,
LOCAL_WORLD_SIZE); this module is the one place that reads it. `extract` and `train` both
run on it: extract only waits for the other ranks and gathers their counts, train also sums
losses and gradients (drafter/loop.py; the FSDP helpers are in drafter/fsdp.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0  # this process's index on its node: its GPU
    local_size: int = 1  # processes on this node
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        """Global rank 0: the process that writes the stage's outputs."""
        return self.rank == 0


def under_torchrun() -> bool:
    """A torchrun process (a user's own torchrun line, or one the stage started)."""
    return "WORLD_SIZE" in os.environ


def local_rank() -> int:
    """This process's index on its node (0 outside torchrun): which GPU it computes on."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def init(device: torch.device, timeout: timedelta | None = None) -> World:
    """Join the run; `device` is this process's compute device (devices.py). `timeout`:
    how long a collective waits for the slowest rank (None: torch's default, 10 minutes
    on NCCL, 30 on gloo)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local = local_rank()
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if size == 1:
        return World(device=device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)  # NCCL's collectives run on the current device
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timeout)
    return World(dist.get_rank(), dist.get_world_size(), local, local_size, device)


def close(world: World) -> None:
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()


def gather(world: World, obj) -> list:
    """Every rank's `obj` (picklable), in rank order, on every rank."""
    if world.size == 1:
        return [obj]
    out = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def all_sum(world: World, values: list[float]) -> list[float]:
    if world.size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=world.device)
    dist.all_reduce(t)
    return t.tolist()


def all_sum_grads(world: World, params: list[torch.nn.Parameter]) -> None:
    """Sum the gradients over the ranks in place, with one all-reduce over a flat buffer
    (train.parallel: ddp). No DistributedDataParallel wrapper: the loss is already
    normalised by the whole step's weight (drafter/loss.py), so a sum is the exact gradient."""
    if world.size == 1:
        return
    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_flag(world: World, flag: bool) -> bool:
    """Rank 0's decision for everyone (e.g. 'a checkpoint to resume exists')."""
    if world.size == 1:
        return flag
    t = torch.tensor([int(flag)], device=world.device)
    dist.broadcast(t, 0)
    return bool(t.item())
