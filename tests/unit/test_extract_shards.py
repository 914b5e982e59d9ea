"""The extraction plan, the streamed shard file, the ledger, top-k teachers and vLLM's
files, on a tiny random Llama (hidden 32) built from transformers' own classes."""

from __future__ import annotations


import pytest
import torch
import xxhash
from extract_helpers import extract_in_process, random_rows
from safetensors import safe_open
from safetensors.torch import save_file

from draftline.hidden import ledger
from draftline.hidden.capture import Capture
from draftline.hidden.plan import PlanError, Record, assign, batches, check_space, plan
from draftline.hidden.shard_file import ShardFileWriter
from draftline.hidden.reader import load_sequences
from draftline.hidden.store import read_index
from draftline.hidden.vllm_files import FinalNorm, VllmFileError, convert, vllm_layer_ids

LAYERS = [0, 2]


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight.mul_(6.0)  # distributions neither flat nor one-hot
    return model


_rows = random_rows


# -- the plan --

def test_bytes_per_token_is_the_arithmetic():
    # Qwen3.6-27B, 5 captured layers + the final state: the 61 KB a token
    assert Record(5120, 5, "final").bytes_per_token == 6 * 5120 * 2 + 4 + 1
    assert Record(7168, 5, "top_k", 32).bytes_per_token == 5 * 7168 * 2 + 5 + 32 * 6
    assert Record(7168, 5, "none").bytes_per_token == 5 * 7168 * 2 + 5


def test_shards_are_byte_sized_and_hold_every_row_once():
    lengths = [int(x) for x in torch.randint(1, 300, (200,), generator=torch.Generator().manual_seed(1))]
    rec = Record(64, 2, "final")
    p = plan(lengths, rec, 20_000)
    rows = [i for s in p.shards for i in s.rows]
    assert sorted(rows) == list(range(200))
    for s in p.shards:
        assert p.shard_size(s) <= 20_000 or len(s.rows) == 1
        assert s.tokens == sum(lengths[i] for i in s.rows)
    assert p.tokens * rec.bytes_per_token == p.total_bytes
    assert plan(lengths, rec, 20_000) == p  # from lengths alone


def test_ranks_get_disjoint_token_balanced_shares():
    p = plan([50] * 37 + [7] * 11, Record(16, 1, "none"), 16 * 2 * 120)
    for world in (1, 2, 3, 8):
        parts = assign(p.shards, world)
        flat = sorted(i for part in parts for i in part)
        assert flat == list(range(len(p.shards)))
        loads = [sum(p.shards[i].tokens for i in part) for part in parts]
        assert max(loads) - min(loads) <= max(s.tokens for s in p.shards)


def test_batches_respect_the_token_budget():
    lengths = sorted([5, 50, 7, 48, 30, 6])
    out = batches(lengths, 100)
    assert [i for b in out for i in b] == list(range(6))
    for b in out:
        assert max(lengths[i] for i in b) * len(b) <= 100 or len(b) == 1


def test_the_planner_refuses_naming_the_numbers(tmp_path):
    with pytest.raises(PlanError, match=r"needs 1000\.0 TB .* free"):
        check_space(10**15, tmp_path / "not" / "yet", 0.05)
    assert not (tmp_path / "not").exists()


# -- the shard file --

def test_a_shard_is_a_safetensors_file_hashed_as_written(tmp_path):
    rec = Record(8, 2, "top_k", 3)
    ids, mask = torch.arange(10, dtype=torch.int32), torch.ones(10, dtype=torch.uint8)
    states = torch.randn(10, rec.state_columns).to(torch.bfloat16)
    k_ids, k_lp = torch.randint(0, 50, (10, 3)), -torch.rand(10, 3)
    with ShardFileWriter(tmp_path / "s.safetensors", rec, ids, mask, {"teacher": "top_k"}) as w:
        w.states(states[:4], k_ids[:4], k_lp[:4])
        w.states(states[4:], k_ids[4:], k_lp[4:])
    data = (tmp_path / "s.safetensors").read_bytes()
    assert w.digest == xxhash.xxh3_128(data).hexdigest() and w.size == len(data)
    with safe_open(str(tmp_path / "s.safetensors"), framework="pt") as f:
        assert torch.equal(f.get_tensor("states"), states)
        assert torch.equal(f.get_tensor("topk_ids"), k_ids.to(torch.int32))
        assert torch.equal(f.get_slice("states")[3:5], states[3:5])
    assert [p.name for p in tmp_path.iterdir()] == ["s.safetensors"]


def test_a_failed_shard_leaves_nothing(tmp_path):
    rec = Record(8, 1, "none")
    with pytest.raises(ValueError, match="2 token rows written for a shard of 5"):
        with ShardFileWriter(tmp_path / "s.safetensors", rec, torch.zeros(5), torch.zeros(5), {}) as w:
            w.states(torch.zeros(2, 8, dtype=torch.bfloat16))
    assert list(tmp_path.iterdir()) == []


# -- the ledger --

def test_the_ledger_trusts_only_whole_lines_for_whole_files(tmp_path):
    for name in ("shard-00000.safetensors", "shard-00001.safetensors", "shard-00002.safetensors"):
        (tmp_path / name).write_bytes(b"x" * 10)
    ledger.append(tmp_path, 0, {"shard": 0, "name": "shard-00000.safetensors", "bytes": 10})
    ledger.append(tmp_path, 1, {"shard": 1, "name": "shard-00001.safetensors", "bytes": 11})  # wrong size
    with open(ledger.ledger_path(tmp_path, 1), "a") as f:
        f.write('{"shard": 2, "name": "shard-00002.safe')  # cut by a kill
    names = {i: f"shard-{i:05d}.safetensors" for i in range(3)}
    assert set(ledger.done(tmp_path, names)) == {0}
    (tmp_path / ".shard-00002.safetensors.host-1.tmp").write_bytes(b"half")
    ledger.sweep(tmp_path, "shard-00002.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir() if "shard-00002" in p.name) == []


def test_another_plans_shards_are_cleared(tmp_path):
    assert not ledger.holds(tmp_path, "a")
    ledger.reset(tmp_path, "a", {})
    (tmp_path / "shard-00000.safetensors").write_bytes(b"x")
    ledger.append(tmp_path, 0, {"shard": 0, "name": "shard-00000.safetensors", "bytes": 1})
    assert ledger.holds(tmp_path, "a") and not ledger.holds(tmp_path, "b")
    ledger.reset(tmp_path, "b", {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"] and ledger.holds(tmp_path, "b")


# -- capture and teachers --

def test_hooks_capture_what_output_hidden_states_reports(llama):
    ids = torch.randint(0, 60, (2, 11))
    attn = torch.ones_like(ids)
    with torch.no_grad():
        ref = llama.model(input_ids=ids, output_hidden_states=True)
    for teacher in ("final", "none", "top_k"):
        cap = Capture(llama, LAYERS, Record(32, 2, teacher, 4 if teacher == "top_k" else 0))
        try:
            states, k_ids, k_lp = cap(ids, attn)
        finally:
            cap.close()
        want = [ref.hidden_states[i + 1] for i in LAYERS] + ([ref.last_hidden_state] if teacher == "final" else [])
        assert torch.equal(states, torch.cat(want, -1).to(torch.bfloat16))
        if teacher == "top_k":
            logp = torch.log_softmax(llama.lm_head(ref.last_hidden_state), -1)
            top = logp.topk(4, -1)
            assert torch.equal(k_ids.long(), top.indices) and torch.allclose(k_lp, top.values, atol=1e-5)


def test_with_no_teacher_the_layers_above_the_deepest_never_run(llama):
    ran = []
    hook = llama.model.layers[3].register_forward_hook(lambda *a: ran.append(1))
    try:
        cap = Capture(llama, LAYERS, Record(32, 2, "none"))
        cap(torch.randint(0, 60, (1, 6)), torch.ones(1, 6, dtype=torch.long))
        cap.close()
        assert ran == []
        cap = Capture(llama, LAYERS, Record(32, 2, "final"))
        cap(torch.randint(0, 60, (1, 6)), torch.ones(1, 6, dtype=torch.long))
        cap.close()
        assert ran == [1]
    finally:
        hook.remove()


def test_a_top_k_teacher_gives_the_final_states_kl_loss(llama, tmp_path):
    """Stored top-k log-probabilities train exactly what the stored final state does: the
    same KL loss on the same blocks, within bf16 storage."""
    from conftest import train_params

    from draftline.config.drafter import DrafterParams
    from draftline.drafter.model import build_drafter, drafter_config
    from draftline.drafter.train_step import Step

    rows = _rows(6)
    extract_in_process(llama, rows, LAYERS, tmp_path / "final", 256, 0)
    extract_in_process(llama, rows, LAYERS, tmp_path / "topk", 256, 0, teacher="top_k", top_k=16)
    final = {s.id: s for s in load_sequences(tmp_path / "final", "train")}
    topk = {s.id: s for s in load_sequences(tmp_path / "topk", "train")}
    assert all(s.final is None and s.topk_ids.shape[1] == 16 for s in topk.values())
    assert read_index(tmp_path / "topk")["teacher"] == "top_k"
    ids = sorted(final)
    dp = DrafterParams(num_layers=1, block_size=4)
    drafter = build_drafter(drafter_config(llama.config, dp, LAYERS, 63), 0)
    tp = train_params(loss="kl", kl_top_k=8, kl_temperature=2.0, num_anchors=6, precision="float32")
    embed, head = llama.model.embed_tokens.weight, llama.lm_head.weight
    losses = []
    for seqs in ([final[i] for i in ids], [topk[i] for i in ids]):
        step = Step(drafter, embed, head, dp, tp, 63)
        batch = step.blocks(seqs, 0, torch.Generator().manual_seed(0))
        with torch.no_grad():
            losses.append(float(step.loss(seqs, batch)[0]))
    assert losses[0] > 0 and abs(losses[0] - losses[1]) <= 1e-2 * losses[0], losses


# -- reading the shards back, row by row --

@pytest.mark.parametrize("teacher", ["final", "top_k"])
def test_streamed_rows_are_the_loaded_rows_in_their_stored_dtypes(llama, tmp_path, monkeypatch, teacher):
    from draftline.hidden import reader

    rows = _rows(30)
    # Shards of a few rows each, and only two open at once: rows come from many mappings.
    extract_in_process(llama, rows, LAYERS, tmp_path, 256, 0, shard_bytes=20_000, teacher=teacher, top_k=8)
    assert len(read_index(tmp_path)["shards"]) > 4
    monkeypatch.setattr(reader, "OPEN_SHARDS", 2)
    loaded = load_sequences(tmp_path, "train")
    streamed = reader.ShardRows(tmp_path, "train")
    assert streamed.ids == [s.id for s in loaded] and streamed.lengths == [len(s.input_ids) for s in loaded]
    order = list(range(len(loaded)))[::-1] + list(range(len(loaded)))  # back and forth over the shards
    for i in order:
        a, b = loaded[i], streamed[i]
        assert b.context.dtype == torch.bfloat16 and torch.equal(a.context, b.context.float())
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
        if teacher == "final":
            assert torch.equal(a.final, b.final.float()) and b.topk_ids is None
        else:
            assert b.final is None and torch.equal(a.topk_ids, b.topk_ids)
            assert torch.equal(a.topk_logprobs, b.topk_logprobs.float())
    assert len(streamed._open) == 2
    assert [s.id for s in streamed[3:7]] == streamed.ids[3:7]
    assert [(i, ids.tolist()) for i, ids in streamed.token_ids()] == [(s.id, s.input_ids.tolist()) for s in loaded]
    streamed.close()


@pytest.mark.parametrize("loss", ["kl", "ce"])
def test_online_features_give_the_offline_loss_on_the_same_batch(llama, tmp_path, loss):
    """train.features: online runs the target per batch; its features and teacher are the
    stored ones up to bf16 rounding (another batch's padding), so the loss matches."""
    import threading

    from conftest import train_params

    from draftline.config.drafter import DrafterParams
    from draftline.drafter.model import build_drafter, drafter_config
    from draftline.drafter.online import OnlineRows
    from draftline.drafter.train_step import Step
    from draftline.hidden.token_rows import TokenRows
    from draftline.io import write_parquet

    rows = _rows(12)
    extract_in_process(llama, rows, LAYERS, tmp_path / "hidden", 256, 0)
    write_parquet(tmp_path / "tokens.parquet", rows)
    record = Record(32, len(LAYERS), "none" if loss == "ce" else "final")
    capture = Capture(llama, LAYERS, record)
    online = OnlineRows(TokenRows.read(tmp_path / "tokens.parquet"), "train", capture, 0, threading.Lock())
    offline = {s.id: s for s in load_sequences(tmp_path / "hidden", "train")}
    assert sorted(online.ids) == sorted(offline)
    picked = [0, 3, 5, 7]  # rows of different lengths: padded together online, not so offline
    got = online.read(picked)
    capture.close()
    stored = [offline[online.ids[i]] for i in picked]
    for a, b in zip(got, stored):
        assert a.id == b.id and torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
        assert torch.allclose(a.context.float(), b.context, rtol=2e-2, atol=2e-2)
        assert (a.final is None) == (loss == "ce")
    dp = DrafterParams(num_layers=1, block_size=4)
    drafter = build_drafter(drafter_config(llama.config, dp, LAYERS, 63), 0)
    tp = train_params(loss=loss, kl_top_k=8, num_anchors=6, precision="float32")
    losses = []
    for seqs in (got, stored):
        step = Step(drafter, llama.model.embed_tokens.weight, llama.lm_head.weight, dp, tp, 63)
        with torch.no_grad():
            losses.append(float(step.loss(seqs, step.blocks(seqs, 0, torch.Generator().manual_seed(0)))[0]))
    assert losses[0] > 0 and abs(losses[0] - losses[1]) <= 1e-2 * losses[1], losses


def test_prefetch_reads_each_steps_rows_ahead_and_reraises_a_failure():
    from draftline.drafter.data import BatchOrder, InMemory, Prefetch

    seqs = [type("S", (), {"id": f"r{i}", "input_ids": torch.zeros(3 + i % 4)})() for i in range(10)]
    rows = InMemory(seqs)
    order = BatchOrder(rows.lengths, rows.ids, 4, 0, 3, 0, 1, 2)
    want = [(order.micro(s), [[seqs[i] for i in m] for m in order.micro(s)]) for s in range(6)]
    with Prefetch(rows, order, 0, 6, 2) as ahead:  # each step's micro-batches, as indices and as rows
        assert [ahead.get(s) for s in range(6)] == want
    with Prefetch(rows, order, 2, 6, 0) as now:  # depth 0: read when asked, from a resumed step
        assert now.get(2) == want[2]

    class Broken(InMemory):
        def read(self, indices):
            raise OSError("shard-00003.safetensors: Input/output error")

    with Prefetch(Broken(seqs), order, 0, 6, 2) as ahead, pytest.raises(OSError, match="shard-00003"):
        ahead.get(0)


# -- vLLM's files --

def test_vllm_layer_ids_count_the_embedding_as_zero():
    # drafter layer i is vLLM id i + 1; the final state is id num_hidden_layers, pre-norm
    assert vllm_layer_ids([1, 16, 31, 46, 61], 64, "final") == [2, 17, 32, 47, 62, 64]
    assert vllm_layer_ids([2, 0], 4, "none") == [1, 3]
    assert vllm_layer_ids([3], 4, "top_k") == [4]  # the last layer's output and the final input coincide


def _vllm_file(llama, row, folder, teacher):
    """One request's file as vLLM's ExampleHiddenStatesConnector writes it (vllm 0.18)."""
    ids = vllm_layer_ids(LAYERS, 4, teacher)
    x = torch.tensor([row["input_ids"]])
    got = {}
    hook = llama.model.layers[3].register_forward_hook(lambda m, a, o: got.setdefault("last", o))
    try:
        with torch.no_grad():
            hs = llama.model(input_ids=x, output_hidden_states=True).hidden_states
    finally:
        hook.remove()
    # id k < L: transformers' hidden_states[k]; id L: the last layer's output before the norm
    cols = [hs[k][0] if k < 4 else got["last"][0] for k in ids]
    path = folder / f"{row['id']}-1a2b3c4d.safetensors"
    save_file({"hidden_states": torch.stack(cols, 1).to(torch.bfloat16).contiguous(),
               "token_ids": x[0].to(torch.int64)}, str(path))
    return path


@pytest.mark.parametrize("teacher", ["final", "top_k", "none"])
def test_vllm_files_convert_to_the_transformers_backends_rows(llama, tmp_path, teacher):
    rows = _rows(3, seed=2)
    k = 4 if teacher == "top_k" else 0
    rec = Record(32, 2, teacher, k)
    norm = FinalNorm(llama.model.norm.weight, llama.config.rms_norm_eps)
    files = [_vllm_file(llama, row, tmp_path, teacher) for row in rows]
    cap = Capture(llama, LAYERS, rec)
    for row, path in zip(rows, files):
        states, k_ids, k_lp = convert(path, row, LAYERS, 4, rec, norm, llama.lm_head)
        want, w_ids, w_lp = cap(torch.tensor([row["input_ids"]]), torch.ones(1, len(row["input_ids"]),
                                                                               dtype=torch.long))
        want = want[0]
        n = 2 * 32
        assert torch.equal(states[:, :n], want[:, :n])  # the captured layers, as stored: the same bf16
        if teacher == "final":  # the norm applied here to vLLM's bf16 pre-norm state
            assert torch.allclose(states[:, n:].float(), want[:, n:].float(), rtol=2e-2, atol=2e-2)
        if teacher == "top_k":
            assert (k_ids[:, 0] == w_ids[0, :, 0]).float().mean() >= 0.9
    cap.close()


def test_a_vllm_file_of_another_prompt_is_refused(llama, tmp_path):
    a, b = _rows(2, seed=3)
    path = _vllm_file(llama, a, tmp_path, "none")
    with pytest.raises(VllmFileError, match="its token_ids are not row 'r1'"):
        convert(path, b, LAYERS, 4, Record(32, 2, "none"), None)
    (tmp_path / "bad.safetensors").write_bytes(b"not a file")
    with pytest.raises(VllmFileError, match="bad.safetensors: not a readable vLLM hidden-states file"):
        convert(tmp_path / "bad.safetensors", a, LAYERS, 4, Record(32, 2, "none"), None)


def test_train_and_extract_keys_must_agree():
    import yaml
    from conftest import ROOT

    from draftline.config.params import Params

    base = yaml.safe_load((ROOT / "params.yaml").read_text())

    def check(extract, train=None):
        return Params.model_validate({**base, "extract": {**base["extract"], **extract},
                                      "train": {**base["train"], **(train or {})}})

    with pytest.raises(ValueError, match="train.loss: kl needs a stored teacher, but extract.teacher is none"):
        check({"teacher": "none"})
    with pytest.raises(ValueError, match=r"train.kl_top_k: 32 .* extract stores its top 16"):
        check({"teacher": "top_k", "top_k": 16})
    check({"teacher": "none"}, {"loss": "ce"})
    check({"teacher": "top_k", "top_k": 32})
