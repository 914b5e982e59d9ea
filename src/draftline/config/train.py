"""The `train` section: the training recipe, its loader, precision and processes."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from .base import PositiveFloat, PositiveInt, Section, check_master


class TrainParams(Section):
    key: ClassVar[str] = "train"

    seed: int = 0
    # Anchors (blocks) sampled per sequence, redrawn every epoch.
    num_anchors: PositiveInt = 64
    # Extra anchors per sequence outside the loss mask (prompts, template, earlier turns),
    # trained on the target's own distribution there: hidden states extraction already
    # paid for, no regeneration. Meant for `kl` (with `ce` the labels are the user's text).
    prompt_anchors: Annotated[int, Field(ge=0)] = 64
    # Position-decay gamma: weight exp(-(k-1)/gamma) for block position k.
    gamma: PositiveFloat | None = 1.0
    # ce: hard labels (the target's own tokens); kl: soft labels, KL(teacher || drafter) at
    # temperature kl_temperature; mix: (1 - kl_weight) * ce + kl_weight * kl.
    loss: Literal["ce", "kl", "mix"] = "kl"
    kl_weight: Annotated[float, Field(ge=0, le=1)] = 0.5
    kl_temperature: PositiveFloat = 2.0
    # Keep only the teacher's k most likely tokens (renormalised); null = the full vocabulary.
    kl_top_k: PositiveInt | None = 32
    # dflash2 only: weight of the selector's loss (cross-entropy over each slot's top-k
    # candidates, the target's token put in when missing), added to the drafter's loss.
    selector_weight: Annotated[float, Field(ge=0)] = 1.0
    # Training's softmax over the N tokens most frequent in the training sequences instead
    # of the whole vocabulary (the LM head is most of a step); evaluation and the exported
    # drafter use the full head. null = the whole vocabulary. See drafter/head_vocab.py.
    head_vocab: PositiveInt | None = 8192
    # random: a fresh drafter; target: drafter layers start as copies of the target's layers
    # after the deepest captured one (dense Llama/Qwen-style targets), see drafter/model.py.
    init: Literal["random", "target"] = "target"
    lr: PositiveFloat = 0.003
    # Cosine decay from lr to lr * min_lr_ratio after a linear warmup.
    min_lr_ratio: Annotated[float, Field(ge=0, le=1)] = 0.0
    warmup_ratio: Annotated[float, Field(ge=0, lt=1)] = 0.04
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    grad_clip: PositiveFloat = 1.0
    epochs: PositiveInt = 5
    # Stop after this many optimizer steps (null = run all epochs).
    max_steps: PositiveInt | None = 1216
    # Sequences per optimizer step, over all processes and accumulation micro-batches:
    # the same value gives the same training whatever the number of processes.
    batch_size: PositiveInt = 2
    # Micro-batches per process per step (memory knob; the result does not depend on it).
    grad_accum: PositiveInt = 1
    # Validation loss, per-position accuracy and acceptance every N steps (and at the end).
    eval_every: PositiveInt = 100
    # Resume state every N steps (train --state); a killed run continues from the last.
    checkpoint_every: PositiveInt = 100
    keep_checkpoints: PositiveInt = 2
    # Compute precision: auto = bf16 autocast on CUDA and on CPUs with bf16 matrix units
    # (AMX / AVX512-BF16, where the LM head runs several times faster), fp32 elsewhere.
    precision: Literal["auto", "float32", "bfloat16"] = "auto"
    # Training attention: blocks = the context and own-block parts only (materialised
    # scores, drafter/block_attention.py), sdpa = one dense masked call; auto = blocks on
    # CPU, sdpa on CUDA (flash tiling for long sequences).
    attention: Literal["auto", "blocks", "sdpa"] = "auto"
    # offline: the features extract stored; online: the frozen target computes them for
    # each batch inside the training processes, nothing stored (drafter/online.py).
    features: Literal["offline", "online"] = "offline"
    # stream: each step's rows read from the memory-mapped shards (bf16, as stored) while the
    # step before computes, memory bounded by prefetch x batch; memory: every row loaded
    # up front as fp32. The same training either way (drafter/data.py).
    loader: Literal["stream", "memory"] = "stream"
    # Steps read ahead by the stream loader's background thread.
    prefetch: PositiveInt = 2
    # Data-parallel processes per node (one per GPU) and nodes: above one process,
    # `draftline train` starts torchrun itself (launch.py).
    processes_per_node: PositiveInt = 1
    nodes: PositiveInt = 1
    # host:port of node 0, reachable from every node; nodes > 1 only.
    master: str | None = None
    # ddp: every process holds the whole drafter; fsdp: weights, gradients and optimizer
    # state sharded over the processes, for a drafter that does not fit (drafter/fsdp.py).
    parallel: Literal["ddp", "fsdp"] = "ddp"

    @model_validator(mode="after")
    def _accum_divides(self) -> "TrainParams":
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of grad_accum ({self.grad_accum})")
        check_master(self.nodes, self.master)
        return self
