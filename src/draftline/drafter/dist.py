"""Data parallelism under torchrun: NCCL on GPUs, gloo on CPUs; plain one process otherwise.

We sum gradients with one all-reduce over a flat buffer after each optimizer step's
backward passes instead of wrapping the drafter in DistributedDataParallel: the loss is
already normalised by the whole step's weight (see loss.py), so a sum is the exact
gradient, and the drafter is small enough that overlapping communication with backward
buys little.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0


def init(device: torch.device) -> World:
    """This process's place in the run; `device` is its compute device (devices.py)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.type == "cuda"
    if size == 1:
        return World(device=device)
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    return World(dist.get_rank(), dist.get_world_size(), local, device)


def close(world: World) -> None:
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def all_sum(world: World, values: list[float]) -> list[float]:
    if world.size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=world.device)
    dist.all_reduce(t)
    return t.tolist()


def all_sum_grads(world: World, params: list[torch.nn.Parameter]) -> None:
    if world.size == 1:
        return
    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()


def broadcast_flag(world: World, flag: bool) -> bool:
    """Rank 0's decision for everyone (e.g. 'a checkpoint to resume exists')."""
    if world.size == 1:
        return flag
    t = torch.tensor([int(flag)], device=world.device)
    dist.broadcast(t, 0)
    return bool(t.item())
