"""The `regenerate` section: the target answers every prompt, in process or on servers."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from .base import BatchDtype, NonNegInt, PositiveFloat, PositiveInt, Section


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
    key: ClassVar[str] = "regenerate"

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
    # Stored answers on which the backend that wrote them is compared with the in-process
    # target (the one extract runs), token by token: the backend records each generated
    # token's log-prob and its own top-1 token, the target scores the same ids. A server
    # in another dtype or quantisation, with another chat template, or a stale target
    # folder shows up as disagreement. The rows are the ones with the smallest keys (so
    # set by the prompts, the settings and `seed`); 0 turns the check off.
    check_rows: NonNegInt = 32
    # The stage fails when the two agree on fewer of the checked tokens' top-1 than this.
    min_top1_agreement: Annotated[float, Field(ge=0, le=1)] = 0.9
    # true: the stage also fails when the check cannot run (a server that returns no
    # log-probs, a target folder the target cannot be loaded from); false: the metrics
    # and a printed line say why, and the stage goes on.
    check_required: bool = True
    openai: OpenAIParams = OpenAIParams()

    @model_validator(mode="after")
    def _samples_need_sampling(self) -> "RegenerateParams":
        if self.samples_per_prompt > 1 and self.temperature == 0:
            raise ValueError("samples_per_prompt > 1 needs temperature > 0 (greedy samples are identical)")
        return self
