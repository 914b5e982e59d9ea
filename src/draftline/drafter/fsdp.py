"""train.parallel: fsdp: the drafter's weights, gradients and AdamW state sharded over the
processes, for a drafter that does not fit one device (a 27B target's 5-layer drafter is
1.9B parameters, about 30 GB in training).

Each decoder layer, then the rest, becomes an FSDP2 unit: parameters are all-gathered layer
by layer for the forward and backward, gradients reduce-scattered, and each process keeps
and updates its shard only. Checkpoints and the exported drafter hold the full weights,
gathered. FSDP averages the gradients over the processes, so the loop scales each backward
by the process count to get the sum (a divide factor of 1 would need NCCL's PREMUL_SUM,
which gloo lacks). `ddp`, the default, needs none of this (distributed.all_sum_grads).
"""

from __future__ import annotations

from ..distributed import World


def shard(drafter, world: World) -> bool:
    """FSDP2 over the processes; False with one process (nothing to shard over)."""
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
    """Full state dicts (a checkpoint) into a sharded model and optimizer: each process
    keeps its shard."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd,
                   options=StateDictOptions(full_state_dict=True))
