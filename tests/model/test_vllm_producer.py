"""`extract.backend: vllm` on CPU: VllmProducer against a stand-in `vllm` (fake_vllm.py) that
writes the files vLLM's hidden-states connector writes, computed by the tiny Qwen3.6-layout
target itself. What vLLM is given (the resolved target, its length, trust_remote_code), the
MLA refusal, and that the shards hold what vLLM wrote, as the transformers path stores it.

The real engine runs in the GPU check (tests/vllm_parity.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from extract_helpers import extract_in_process

import fake_vllm
from draftline.config.drafter import DrafterParams
from draftline.config.extract import ExtractParams
from draftline.config.target import TargetParams
from draftline.hidden import ledger
from draftline.hidden.merge import merge
from draftline.hidden.plan import Record, plan
from draftline.hidden.reader import load_sequences
from draftline.hidden.vllm_backend import SAMPLED_TOKENS, VllmBackendError, VllmProducer
from draftline.hidden.vllm_files import vllm_layer_ids
from draftline.hidden.write import write_shards
from draftline.target.info import TargetInfo, describe
from draftline.target.load import POINTER, load_model

LAYERS = [0, 2]
HIDDEN, NUM_LAYERS = 64, 4


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> tuple[Path, TargetInfo]:
    """The tiny Qwen3.6-layout checkpoint (hybrid Gated DeltaNet, vision tower) and its info."""
    from tiny_layouts import qwen36_target

    real = qwen36_target(tmp_path_factory.mktemp("hub") / "qwen36", num_layers=NUM_LAYERS)
    info = describe(real, TargetParams(), DrafterParams(num_layers=2, target_layer_ids=LAYERS), {"source": "tiny"})
    return real, TargetInfo(**{k: info[k] for k in TargetInfo.__dataclass_fields__})


@pytest.fixture(scope="module")
def model(target):
    return load_model(target[0])


def _pointer(folder: Path, real: Path) -> Path:
    """The target stage's folder under `target.materialize: false`: a pointer, no weights."""
    folder.mkdir(parents=True)
    (folder / POINTER).write_text(json.dumps({"path": str(real), "source": "tiny"}))
    return folder


def _rows(n: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        length = int(torch.randint(5, 40, (1,), generator=g))
        rows.append({"id": f"r{i}", "split": "val" if i % 4 == 3 else "train",
                     "input_ids": torch.randint(0, 248000, (length,), generator=g).tolist(),
                     "loss_mask": [0] * (length // 3) + [1] * (length - length // 3)})
    return rows


def _store(produce, rows: list[dict], record: Record, folder: Path, shard_bytes: int) -> None:
    """The stage's writing of every shard with `produce`, then its index and manifest."""
    the_plan = plan([len(r["input_ids"]) for r in rows], record, shard_bytes)
    folder.mkdir(parents=True, exist_ok=True)
    write_shards(produce, rows, the_plan, list(the_plan.shards), folder, LAYERS)
    merge(folder, None, LAYERS, record, the_plan, ledger.done(folder, {s.index: s.name for s in the_plan.shards}))


def _producer(tmp_path, target, record, longest, trust=False) -> VllmProducer:
    real, info = target
    model_dir = _pointer(tmp_path / "data/target/model", real)
    p = ExtractParams(backend="vllm", vllm_storage=str(tmp_path / "vllm"))
    return VllmProducer(model_dir, info, record, p, longest=longest, trust_remote_code=trust)


@pytest.mark.parametrize("trust", [False, True])
def test_vllm_is_given_the_resolved_target_its_length_and_trust(tmp_path, monkeypatch, target, trust):
    fake_vllm.install(monkeypatch)
    record = Record(HIDDEN, len(LAYERS), "final")
    _producer(tmp_path, target, record, longest=37, trust=trust)
    (kw,) = fake_vllm.LLM.made
    assert kw["model"] == str(target[0])  # SOURCE.json followed: the folder with config.json and weights
    assert kw["max_model_len"] == 37 + SAMPLED_TOKENS == 38  # vLLM refuses a prompt of max_model_len tokens
    assert kw["trust_remote_code"] is trust
    assert kw["enable_chunked_prefill"] is False and kw["tensor_parallel_size"] == 1
    ids = kw["speculative_config"]["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == vllm_layer_ids(LAYERS, NUM_LAYERS, "final") == [1, 3, 4]


def test_the_plans_longest_row_fits_and_one_more_token_does_not(tmp_path, monkeypatch, target):
    fake_vllm.install(monkeypatch)
    record = Record(HIDDEN, len(LAYERS), "none")
    rows = _rows(3)
    longest = max(len(r["input_ids"]) for r in rows)
    produce = _producer(tmp_path, target, record, longest)
    assert sum(s.shape[0] for s, _, _ in produce(rows)) == sum(len(r["input_ids"]) for r in rows)
    too_long = {**rows[0], "input_ids": [1] * (longest + 1)}
    with pytest.raises(ValueError, match="longer than the maximum model length"):
        list(produce([too_long]))


@pytest.mark.parametrize("teacher", ["final", "top_k", "none"])
def test_shards_hold_what_vllm_wrote_as_the_transformers_path_stores_it(tmp_path, monkeypatch, target, model,
                                                                         teacher):
    fake_vllm.install(monkeypatch)
    k = 4 if teacher == "top_k" else 0
    record = Record(HIDDEN, len(LAYERS), teacher, k)
    rows = _rows(8)
    bpt = record.bytes_per_token
    produce = _producer(tmp_path, target, record, max(len(r["input_ids"]) for r in rows))
    _store(produce, rows, record, tmp_path / "vllm-shards", 60 * bpt)  # several shards, several generate calls
    extract_in_process(model, rows, LAYERS, tmp_path / "hf-shards", teacher=teacher, top_k=k or 4,
                       shard_bytes=60 * bpt)

    assert len(list((tmp_path / "vllm-shards").glob("shard-*.safetensors"))) >= 2
    assert not list((tmp_path / "vllm").iterdir())  # every request's file and lock deleted once converted
    ids = vllm_layer_ids(LAYERS, NUM_LAYERS, teacher)
    written = {tuple(ids): hidden for ids, hidden in fake_vllm.LLM.written.values()}
    got = {s.id: s for s in load_sequences(tmp_path / "vllm-shards")}
    want = {s.id: s for s in load_sequences(tmp_path / "hf-shards")}
    assert sorted(got) == sorted(want) == sorted(r["id"] for r in rows)
    for r in rows:
        g, w, hidden = got[r["id"]], want[r["id"]], written[tuple(r["input_ids"])]
        assert g.input_ids.tolist() == r["input_ids"] and torch.equal(g.loss_mask, w.loss_mask)
        # the captured layers: vLLM's bf16 columns, ids i + 1, stored bit for bit ...
        vllm_cols = torch.cat([hidden[:, ids.index(i + 1)] for i in LAYERS], -1).float()
        assert torch.equal(g.context, vllm_cols)
        # ... and the transformers path's states (the same float32 forward, rounded once)
        assert torch.equal(g.context, w.context)
        if teacher == "final":  # the norm applied here to vLLM's bf16 pre-norm state
            torch.testing.assert_close(g.final, w.final, rtol=2e-2, atol=2e-2)
        if teacher == "top_k":
            assert (g.topk_ids[:, 0] == w.topk_ids[:, 0]).float().mean() >= 0.9


def test_an_mla_target_is_refused_before_vllm_starts(tmp_path, monkeypatch, target):
    fake_vllm.install(monkeypatch)
    _, info = target
    kimi = TargetInfo(**{**info.__dict__, "architecture": "Kimi_K25ForConditionalGeneration",
                         "model_type": "deepseek_v3", "attention": "mla", "layer_types": ["full_attention"] * 4})
    with pytest.raises(VllmBackendError) as err:
        _producer(tmp_path, (target[0], kimi), Record(HIDDEN, len(LAYERS), "final"), longest=10)
    assert str(err.value) == (
        "extract.backend: vllm: MLA targets (Kimi_K25ForConditionalGeneration) are not proven with vLLM's "
        "hidden-states connector (vLLM 0.33 raises 'MLA verifiers are unsupported'); use extract.backend: "
        "transformers")
    assert fake_vllm.LLM.made == []  # no engine was started


def test_all_zero_states_from_vllm_are_never_recorded_as_done(tmp_path, monkeypatch, target):
    """vLLM before PR #46301 (0.25.0) wrote zeros for hybrid targets: the shard is refused."""
    fake_vllm.install(monkeypatch)
    fake_vllm.LLM.zeros = True
    record = Record(HIDDEN, len(LAYERS), "none")
    rows = _rows(3)
    produce = _producer(tmp_path, target, record, max(len(r["input_ids"]) for r in rows))
    with pytest.raises(ValueError, match="all-zero"):
        _store(produce, rows, record, tmp_path / "shards", 10**9)
    assert ledger.done(tmp_path / "shards", {0: "shard-00000.safetensors"}) == {}
