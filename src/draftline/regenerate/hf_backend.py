"""In-process generation with transformers, batched with left padding."""

from __future__ import annotations

import torch
from transformers import LogitsProcessorList

from ..config.chat import ChatParams

from ..config.regenerate import RegenerateParams
from .answer import Answer, opens_reasoning, split_reasoning
from .context import chat_ids
from .kv_cache import growing_cache
from .logprobs import LogprobRecorder, token_name
from .sampler import NucleusSampler


class HFBackend:
    name = "hf"

    def __init__(self, model, tokenizer, params: RegenerateParams, eos_ids: list[int], chat: ChatParams | None = None):
        self.model = model
        self.tok = tokenizer
        self.params = params
        self.chat = chat or ChatParams()
        self.template_kwargs = self.chat.template_kwargs()
        self.eos_ids = eos_ids
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
        self.served_model = "hf:" + str(getattr(model.config, "_name_or_path", "") or "local")

    def _encode(self, conversations: list[list[dict]]) -> list[list[int]]:
        # Template variables (thinking on/off) reach the template as they would on a server.
        return [chat_ids(self.tok, conv, self.template_kwargs) for conv in conversations]

    def _opened(self, prompt: list[int]) -> bool:
        # The prompt's last few tokens say whether it leaves a reasoning block open.
        return opens_reasoning(self.tok.decode(prompt[-8:], skip_special_tokens=False))

    @torch.inference_mode()
    def generate(self, conversations: list[list[dict]], seed: int | list[int],
                 scored: list[bool] | None = None) -> list[Answer]:
        """seed: one for all conversations, or one each (used only when sampling);
        scored: which conversations record their tokens' log-probs (the agreement sample)."""
        seeds = [seed] * len(conversations) if isinstance(seed, int) else list(seed)
        encoded = self._encode(conversations)
        width = max(len(e) for e in encoded)
        input_ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros_like(input_ids)
        for i, e in enumerate(encoded):  # left padding: every prompt ends at the same column
            input_ids[i, width - len(e):] = torch.tensor(e)
            attn[i, width - len(e):] = 1
        p = self.params
        # Sampling draws inside NucleusSampler (the cost of transformers' own top-p is in its
        # module doc), so generate always runs its greedy path.
        processors = LogitsProcessorList()
        rows = [i for i, s in enumerate(scored or []) if s]
        recorder = LogprobRecorder(rows) if rows else None
        if recorder is not None:  # first: it reads the logits before the sampler replaces them
            processors.append(recorder)
        if p.temperature > 0:
            processors.append(NucleusSampler(p.temperature, p.top_p, seeds))
        dev = self.model.device
        out = self.model.generate(
            input_ids=input_ids.to(dev), attention_mask=attn.to(dev), max_new_tokens=p.max_new_tokens,
            do_sample=False, temperature=None, top_p=None, top_k=None, logits_processor=processors,
            eos_token_id=self.eos_ids, pad_token_id=self.pad_id,
            cache=growing_cache(self.model.config),
        )
        logprobs, top1 = recorder.finish(out) if recorder is not None else ([], [])
        recorded = dict(zip(rows, zip(logprobs, top1)))
        out = out.cpu()
        answers = []
        for i, e in enumerate(encoded):
            gen = out[i, width:].tolist()
            stop = next((j for j, t in enumerate(gen) if t in self.eos_ids), None)
            # What the target emitted: up to and including its stop token, none of the
            # padding a batch adds after it.
            ids = gen if stop is None else gen[:stop + 1]
            text = self.tok.decode(ids if stop is None else ids[:-1], skip_special_tokens=False)
            text, reasoning = split_reasoning(text, opened=self._opened(e))
            answers.append(Answer(text=text, reasoning=reasoning,
                                  finish_reason="length" if stop is None else "stop",
                                  prompt_tokens=len(e), completion_tokens=len(ids),
                                  served_model=self.served_model, endpoint="local", token_ids=ids))
            if i in recorded:  # the steps after its stop token are the batch's, not its own
                lps, top = recorded[i]
                answers[-1].logprobs, answers[-1].top1 = lps[:len(ids)], top[:len(ids)]
                answers[-1].logprob_tokens = [token_name(t) for t in ids]
        return answers
