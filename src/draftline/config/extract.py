"""The `extract` section: hidden-state capture, its teacher, shards and backend."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from .base import BatchDtype, PositiveInt, Section, check_master


class ExtractParams(Section):
    key: ClassVar[str] = "extract"

    # Tokens per forward pass (rows are batched by length up to this budget).
    batch_tokens: PositiveInt = 8192
    # Bytes per safetensors shard, whatever the width (a 27B target's 61 KB per token and a
    # 135M one's 3.5 KB both make ~2 GB files): a few large files, not one per sample, and
    # a kill loses at most one shard per rank.
    shard_bytes: Annotated[int, Field(ge=1024)] = 2_000_000_000
    # The target's compute dtype here (the stored states' dtype is state_dtype); auto as
    # in regenerate.dtype.
    dtype: BatchDtype = "auto"
    # How the states are stored: bfloat16, or float8_e4m3fn with a float32 scale per token
    # and state, half the bytes (hidden/state_dtype.py; Decisions: extract.state_dtype).
    # The final state follows it; top-k log-probabilities stay bf16.
    state_dtype: Literal["bfloat16", "float8_e4m3fn"] = "bfloat16"
    # What the KL teacher is stored as: the final (post-norm) state, hidden x 2 bytes a
    # token; the target's top_k token ids and log-probabilities, top_k x 6 bytes (train's
    # kl_top_k must not exceed it); or none (train.loss: ce), which also stops the
    # forward after the deepest captured layer.
    teacher: Literal["final", "top_k", "none"] = "final"
    top_k: PositiveInt = 32
    # Where the shards go: null = inside the stage's output folder (DVC caches them); a
    # folder (a large local or shared filesystem) keeps them out of the DVC cache, which
    # then versions only the index and the manifest of sizes and SHA-256s.
    shard_dir: str | None = None
    # Refuse to start unless the remaining shards x (1 + margin) fit in the free space.
    free_space_margin: Annotated[float, Field(ge=0)] = 0.05
    # transformers: this process runs the target (torchrun for data parallel, --target-
    # device-map auto across a rank's GPUs); vllm: vLLM's extract_hidden_states method
    # (the `gpu` extra), for targets that need its tensor parallelism (1T MoE).
    backend: Literal["transformers", "vllm"] = "transformers"
    vllm_tensor_parallel_size: PositiveInt = 1
    # Per-request files vLLM writes before they are packed into shards (fast local disk).
    vllm_storage: str = "/dev/shm/draftline-hidden"
    # Data-parallel processes per node (one per GPU) and nodes: above one process,
    # `draftline extract` starts torchrun itself (launch.py), each rank its share of shards.
    processes_per_node: PositiveInt = 1
    nodes: PositiveInt = 1
    # host:port of node 0, reachable from every node; nodes > 1 only.
    master: str | None = None

    @model_validator(mode="after")
    def _one_launch(self) -> "ExtractParams":
        check_master(self.nodes, self.master)
        if self.backend == "vllm" and self.processes_per_node * self.nodes > 1:
            # vLLM spreads the target over its GPUs itself, from one process.
            raise ValueError(f"processes_per_node: {self.processes_per_node}, nodes: {self.nodes}; backend: vllm "
                             "runs as one process (vllm_tensor_parallel_size spreads the target)")
        return self
