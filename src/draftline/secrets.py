"""The secrets this process knows, and masking them wherever text leaves the process.

A value is registered where it is read from the environment (the API key named by
regenerate.openai.api_key_env, each ${VAR} of a launch command); text bound for an artifact,
a metrics file, a log, the terminal or an exception goes through `mask` first, because
servers echo request headers and arguments in their error bodies.

    secrets.register(os.environ.get(name)); print(secrets.mask(reason))
"""

from __future__ import annotations

import json

MASKED = "***"
# Shorter values are left alone: masking a port or a GPU id taken from ${VAR} would garble
# every URL and number in the output, and no real API key is this short.
MIN_LENGTH = 8

_values: set[str] = set()


def register(value: str | None) -> None:
    """Mask `value` from now on; None, empty and too-short values are ignored."""
    if not value or len(value) < MIN_LENGTH:
        return
    # Also as it reads inside JSON (an echoed header in a JSON error body, a metrics file).
    _values.update({value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]})


def mask(text: str) -> str:
    """`text` with every registered value replaced by ***."""
    for value in sorted(_values, key=len, reverse=True):  # longest first: a secret inside another goes whole
        text = text.replace(value, MASKED)
    return text
