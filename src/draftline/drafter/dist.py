"""Data parallelism under torchrun: NCCL on GPUs, gloo on CPUs; plain one process otherwise.

`train.parallel: ddp` (the default): every process holds the whole drafter and we sum
gradients with one all-reduce over a flat buffer after each optimizer step's backward
passes, instead of wrapping the drafter in DistributedDataParallel: the loss is already
normalised by the whole step's weight (see loss.py), so a sum is the exact gradient.

`fsdp`: for a drafter whose weights, gradients and AdamW state do not fit one device (a
27B target's 5-layer drafter is 1.9B parameters, about 30 GB in training). Each decoder
layer, then the rest, becomes an FSDP2 unit: parameters are all-gathered layer by layer
for the forward and backward, gradients reduce-scattered, and each
process keeps and updates its shard only. Checkpoints and the exported drafter hold the
full weights, gathered. FSDP averages the gradients over the processes, so the loop
scales each backward by the process count to get the sum (a divide factor of 1 would need
NCCL's PREMUL_SUM, which gloo lacks).
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


def shard(drafter, world: World) -> bool:
    """FSDP2 over the processes (train.parallel: fsdp); False with one process."""
    if world.size == 1:
        return False
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(world.device.type, (world.size,))
    for layer in drafter.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(drafter, mesh=mesh)
    return True


def full_state(model, optimizer=None) -> tuple[dict, dict | None]:
    """The full (unsharded) state dicts on CPU; a collective: every process calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd = get_model_state_dict(model, options=options)
    return model_sd, None if optimizer is None else get_optimizer_state_dict(model, optimizer, options=options)


def load_full_state(model, optimizer, model_sd: dict, optim_sd: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd,
                   options=StateDictOptions(full_state_dict=True))
