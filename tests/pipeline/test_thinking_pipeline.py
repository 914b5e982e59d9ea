"""A thinking target through regenerate and tokenize with real `dvc repro`: a Qwen3.6-class
tokenizer and template, answers from a loopback server that returns `reasoning_content`
(and, in the second case, the generated token ids), smoke params otherwise."""

import json
import shutil

import pyarrow.parquet as pq
import pytest
import yaml
from chat_tokenizers import qwen36, save_to, supervised_segments
from conftest import ROOT
from pipeline_helpers import copy_code, run_command
from thinking_server import ThinkingServer, answer_of, reasoning_of

from draftline.io import write_parquet
from draftline.presets import merged

pytestmark = pytest.mark.slow

PROMPTS = [[{"role": "user", "content": "What is 2+3?"}],
           [{"role": "user", "content": "Name a colour."}],
           [{"role": "user", "content": "Pick a number."}, {"role": "user", "content": "Now double it."}]]


def _repo(repo, url: str, token_ids: bool):
    tok = qwen36()
    from transformers import Qwen3Config

    # The target's tokenizer and config: the stages read them for servers too; no weights.
    model = save_to(tok, repo / "data/target/model")
    Qwen3Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=8, max_position_embeddings=4096).save_pretrained(model)
    write_parquet(repo / "data/mix/train.parquet", [
        {"id": f"q{i}", "source": "s", "category": "chat", "split": "train", "messages": m}
        for i, m in enumerate(PROMPTS)])
    copy_code(ROOT, repo)
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    params = merged(ROOT / "presets/smoke.yaml", ROOT / "params.yaml")
    params["chat"] = {"thinking": "on", "thinking_kwarg": "enable_thinking", "chat_template_kwargs": {}}
    # check_rows 0: the scripted server is not the tiny target's weights (agreement: test_regenerate_agreement.py)
    params["regenerate"] |= {"backend": "openai", "token_ids": token_ids, "check_rows": 0, "openai": {
        **params["regenerate"]["openai"], "urls": [url], "model": "thinker", "startup_timeout_s": 10}}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_command("git init -q && dvc init -q && git add -A && git commit -qm init", repo)
    return tok


@pytest.mark.parametrize("token_ids", [False, True], ids=["text", "token-ids"])
def test_a_thinking_target_trains_on_its_reasoning(tmp_path, monkeypatch, token_ids):
    with ThinkingServer(qwen36()) as srv:
        tok = _repo(tmp_path, srv.url, token_ids)
        monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'src'}:{tmp_path}")  # stages import the copy under test
        run_command("dvc repro -s regenerate", tmp_path)
        run_command("dvc repro -s tokenize", tmp_path)
    # the requests asked for thinking, and for ids only when told to
    assert all(b["chat_template_kwargs"] == {"enable_thinking": True} for b in srv.bodies)
    assert all(bool(b.get("return_token_ids")) == token_ids for b in srv.bodies)
    answers = {r["id"]: r for r in pq.read_table(tmp_path / "data/regen/answers.parquet").to_pylist()}
    assert answers["q0"]["reasoning"] == [reasoning_of("What is 2+3?")]
    assert (answers["q2"]["completion_ids"] is not None) == token_ids
    rows = {r["id"]: r for r in pq.read_table(tmp_path / "data/tokens/train.parquet").to_pylist()}
    # Qwen3.6 drops earlier reasoning: the two-turn conversation is a sequence per turn
    assert sorted(rows) == ["q0", "q1", "q2@0", "q2@1"]
    for rid, question in [("q0", "What is 2+3?"), ("q2@0", "Pick a number."), ("q2@1", "Now double it.")]:
        assert supervised_segments(tok, rows[rid]["input_ids"], rows[rid]["loss_mask"]) == [f"{reasoning_of(question)}\n</think>\n\n{answer_of(question)}<|im_end|>"]
    # the second turn's prompt holds the first answer, not its reasoning
    prompt = tok.decode(rows["q2@1"]["input_ids"][:rows["q2@1"]["loss_mask"].index(1)])
    assert answer_of("Pick a number.") in prompt and reasoning_of("Pick a number.") not in prompt
    m = json.loads((tmp_path / "data/metrics/tokenize.json").read_text())
    assert (m["conversations"], m["rows"], m["conversations_split_by_turn"]) == (3, 4, 1)
    assert m["sequences_per_conversation"] == 1.333 and m["unrendered"] == 0
    assert m["reasoning_tokens"] > m["answer_tokens"] > 0
    assert m["rows_with_token_ids"] == (3 if token_ids else 0) and m["turns_ids_differ_from_text"] == 0
