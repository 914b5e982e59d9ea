"""secrets.mask: every registered value, raw or JSON-escaped, becomes ***; the servers'
logs and the error reasons built from server bodies go through it."""

import json

import pytest

from draftline import secrets
from draftline.regenerate import servers
from draftline.regenerate.client import RowFailure, _excerpt

KEY = 'sk-live-"quoted"\\slash-0123456789'


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(secrets, "_values", set())  # the registry is process-wide


def test_mask_replaces_every_registered_value():
    assert secrets.mask(f"Bearer {KEY}") == f"Bearer {KEY}"  # nothing registered yet
    secrets.register(KEY)
    secrets.register("hf_abcdefghijklmnop")
    text = f"auth=Bearer {KEY}; again {KEY}; token hf_abcdefghijklmnop"
    assert secrets.mask(text) == "auth=Bearer ***; again ***; token ***"
    # echoed inside a JSON body, the key is escaped
    assert secrets.mask(json.dumps({"Authorization": f"Bearer {KEY}"})) == '{"Authorization": "Bearer ***"}'


def test_empty_and_short_values_are_ignored():
    for v in (None, "", "8000", "x" * (secrets.MIN_LENGTH - 1)):
        secrets.register(v)
    assert secrets.mask("port 8000 xxxxxxx") == "port 8000 xxxxxxx"


def test_a_secret_inside_another_is_masked_whole():
    secrets.register("abcdefgh")
    secrets.register("abcdefgh-and-more")
    assert secrets.mask("abcdefgh-and-more abcdefgh") == "*** ***"


def test_launch_variables_become_secrets(monkeypatch):
    monkeypatch.setenv("LAUNCH_KEY", "sk-launch-0123456789")
    assert servers.expand("serve --api-key ${LAUNCH_KEY}") == ["serve", "--api-key", "sk-launch-0123456789"]
    assert secrets.mask("args: --api-key sk-launch-0123456789") == "args: --api-key ***"


def test_reasons_are_masked_before_they_are_cut():
    secrets.register(KEY)
    cut = _excerpt(b"x" * 290 + f"Bearer {KEY}".encode(), 300)
    assert cut.endswith("Bearer ***") and "sk-live" not in cut
    assert RowFailure("http_4xx", f"HTTP 400: {KEY}", 1).reason == "HTTP 400: ***"
