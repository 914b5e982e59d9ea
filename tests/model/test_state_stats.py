"""Stored hidden states are checked as they are written, on the embedded target: a shard
holding an all-zero or a non-finite row stops the extract stage, naming each, before any
run trusts the shard; a sound run's manifest carries each layer's RMS and counts, and
`draftline inspect --hidden` prints them."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner
from conftest import train_params
from extract_helpers import extract_in_process

from draftline.cli import main
from draftline.config.drafter import DrafterParams
from draftline.config.extract import ExtractParams
from draftline.config.target import TargetParams
from draftline.hidden import ledger
from draftline.hidden.capture import decoder_layers
from draftline.hidden.plan import Record
from draftline.hidden.reader import load_sequences
from draftline.hidden.state_stats import StateCheck, UnsoundStates
from draftline.io import read_json, write_parquet
from draftline.target.info import describe

LAYERS = [3, 15]
# Sorted by length, 16 tokens a shard: shard 0 holds g5 and g6, shard 1 `zeroed` and `nan`.
LENGTHS = {"g5": 5, "g6": 6, "zeroed": 7, "nan": 8}
SHARD_TOKENS = 16


def _rows() -> list[dict]:
    g = torch.Generator().manual_seed(0)
    return [{"id": k, "split": "train", "input_ids": torch.randint(100, 5000, (n,), generator=g).tolist(),
             "loss_mask": [1] * n} for k, n in LENGTHS.items()]


def _plant(module, args, output):
    """On the captured layer 3: token 2 of `zeroed` all zero, the last token of `nan` NaN.
    Each row is a batch of its own (batch_tokens 1), unpadded, so its length tells it."""
    h = output[0] if isinstance(output, tuple) else output
    if h.shape[1] == LENGTHS["zeroed"]:
        h[0, 2] = 0.0
    if h.shape[1] == LENGTHS["nan"]:
        h[0, -1] = float("nan")


def test_a_zero_row_and_a_nan_row_stop_the_stage_naming_each(tmp_path, target_dir, monkeypatch):
    """The real stage (extract.run) on the embedded target, a hook planting the bad rows in
    what the target computes: the failure names the shard and each row, the bad shard gets
    no ledger line, and the rerun keeps shard 0 and recomputes shard 1."""
    from draftline.hidden import extract
    from draftline.target import load

    info = describe(target_dir, TargetParams(), DrafterParams(target_layer_ids=LAYERS), {"source": "embedded"})
    (tmp_path / "info.json").write_text(json.dumps(info))
    write_parquet(tmp_path / "tokens.parquet", _rows())
    bpt = Record(info["hidden_size"], len(LAYERS), "final").bytes_per_token
    params = SimpleNamespace(extract=ExtractParams(batch_tokens=1, shard_bytes=SHARD_TOKENS * bpt), train=train_params())
    out, metrics = tmp_path / "hidden", tmp_path / "extract.json"
    real_load, planting = load.load_model, [True]

    def load_with_plant(*a, **kw):
        model = real_load(*a, **kw)
        if planting[0]:
            decoder_layers(model.get_decoder()).__getitem__(LAYERS[0]).register_forward_hook(_plant)
        return model

    monkeypatch.setattr(load, "load_model", load_with_plant)

    def stage():
        extract.run(params, target_dir, tmp_path / "info.json", tmp_path / "tokens.parquet", out, metrics,
                    torch.device("cpu"))

    with pytest.raises(UnsoundStates) as err:
        stage()
    line = str(err.value)
    assert "\n" not in line and f"{out / 'shard-00001.safetensors'} holds 1 all-zero and " in line
    assert "all-zero at layer 3 (1 row(s)): sequence 'zeroed' (shard row 0) token 2;" in line
    # (the NaN also reaches layer 15 and the final state, in every token of its row)
    assert "non-finite at layer 3 (1 row(s)): sequence 'nan' (shard row 1) token 7;" in line
    names = {0: "shard-00000.safetensors", 1: "shard-00001.safetensors"}
    assert set(ledger.done(out, names)) == {0}  # shard 1 is on disk for a look, but not done
    assert (out / names[1]).is_file() and not (out / "manifest.json").exists() and not metrics.exists()

    planting[0] = False  # the target mended: the rerun keeps shard 0 and recomputes shard 1
    stage()
    m = read_json(metrics)
    assert m["resumed_shards"] == 1 and m["shards_written"] == 1
    assert m["zero_rows"] == m["nonfinite_rows"] == 0 and list(m["state_rms"]) == ["3", "15", "final"]
    stats = [s["state_stats"] for s in read_json(out / "manifest.json")["shards"]]
    assert all(st["zero_rows"] == st["nonfinite_rows"] == 0 for s in stats for st in s.values())


def test_a_sound_runs_manifest_holds_each_layers_rms(tmp_path, target_model, monkeypatch):
    """Per shard and layer: the RMS of the stored bf16 states (recomputed here from the
    shards) and no zero or non-finite row. The check only reads: the shards' bytes are
    those written without it."""
    from draftline.hidden import write

    rows = _rows()
    extract_in_process(target_model, rows, LAYERS, tmp_path, 64, 0, shard_bytes=SHARD_TOKENS * 3461)
    with monkeypatch.context() as m:
        m.setattr(write, "StateCheck", type("Unchecked", (StateCheck,), {"add": lambda self, states: None}))
        extract_in_process(target_model, rows, LAYERS, tmp_path / "unchecked", 64, 0, shard_bytes=SHARD_TOKENS * 3461)
    for name in ("shard-00000.safetensors", "shard-00001.safetensors"):
        assert (tmp_path / name).read_bytes() == (tmp_path / "unchecked" / name).read_bytes()
    manifest = read_json(tmp_path / "manifest.json")
    assert len(manifest["shards"]) == 2
    seqs = {s.id: s for s in load_sequences(tmp_path)}
    hidden = manifest["hidden_size"]
    for shard, ids in zip(manifest["shards"], (["g5", "g6"], ["zeroed", "nan"])):
        states = torch.cat([torch.cat([seqs[i].context, seqs[i].final], -1) for i in ids]).double()
        want = states.view(-1, 3, hidden).square().mean((0, 2)).sqrt()
        st = shard["state_stats"]
        assert list(st) == ["3", "15", "final"]
        for label, w in zip(st, want.tolist()):
            assert st[label]["zero_rows"] == 0 and st[label]["nonfinite_rows"] == 0
            assert st[label]["rms"] == pytest.approx(w, rel=1e-5)
    # the layers differ in scale: a wrong column split would not match all three
    assert len({round(st["rms"], 3) for st in manifest["shards"][0]["state_stats"].values()}) == 3


def test_many_bad_rows_are_counted_and_the_first_few_named(tmp_path):
    """A shard of zeros: every row counted, five a layer named, the rest a count. -0.0 is
    zero and inf non-finite; a tiny value (its square is 0 in float32) is not zero, and a
    huge one (its square overflows float32) is finite and counted in the RMS."""
    hidden, labels = 4, ["1", "final"]
    states = torch.zeros(3000, 2 * hidden, dtype=torch.bfloat16)
    states[1, :hidden] = -0.0
    states[2, 5] = 1e-30  # in `final`
    states[3, :hidden] = 1e30  # in layer 1
    states[2500, 1] = float("inf")
    index_rows = [{"id": "a", "offset": 0, "length": 2000}, {"id": "b", "offset": 2000, "length": 1000}]
    with StateCheck(labels, hidden) as check:  # two batches, each more than a chunk
        check.add(states[:1500])
        check.add(states[1500:])
    st = check.stats()
    huge = float(torch.tensor(1e30, dtype=torch.bfloat16))
    assert st["1"] == {"rms": pytest.approx(huge / 2999 ** 0.5, rel=1e-5), "zero_rows": 2998, "nonfinite_rows": 1}
    assert 0 < st["final"]["rms"] < 1e-30 and (st["final"]["zero_rows"], st["final"]["nonfinite_rows"]) == (2999, 0)
    with pytest.raises(UnsoundStates) as err:
        check.refuse_unsound(tmp_path / "shard-00007.safetensors", index_rows)
    line = str(err.value)
    assert "shard-00007.safetensors holds 5997 all-zero and 1 non-finite" in line
    assert "all-zero at layer 1 (2998 row(s)): sequence 'a' (shard row 0) tokens 0,1,2,4,5 and 2993 more;" in line
    assert "all-zero at the final state (2999 row(s)): sequence 'a' (shard row 0) tokens 0,1,3,4,5 and 2994 more;" in line
    assert "non-finite at layer 1 (1 row(s)): sequence 'b' (shard row 1) token 500." in line


@pytest.mark.parametrize("state_dtype", ["bfloat16", "float8_e4m3fn"])
def test_inspect_hidden_prints_each_layers_statistics(tmp_path, target_model, state_dtype):
    extract_in_process(target_model, _rows(), LAYERS, tmp_path, 64, 0, shard_bytes=SHARD_TOKENS * 3461,
                       state_dtype=state_dtype)
    manifest = read_json(tmp_path / "manifest.json")
    result = CliRunner().invoke(main, ["inspect", "--hidden", str(tmp_path)])
    print(result.output)
    assert result.exit_code == 0, result.output
    head, columns, *table = result.output.splitlines()
    bpt = Record(576, len(LAYERS), "final", 0, state_dtype).bytes_per_token
    assert head.startswith(f"{tmp_path / 'manifest.json'}: 26 tokens in {len(manifest['shards'])} shard(s), "
                           f"{bpt:,} B/token")
    assert (f"hidden 576 ({state_dtype}, a float32 scale per token and layer; statistics before FP8 rounding)"
            if state_dtype == "float8_e4m3fn" else "hidden 576 (bfloat16);") in head
    assert columns.split("  ")[0] == "layer" and "all-zero rows" in columns and "non-finite rows" in columns
    assert [r.split()[0] for r in table] == ["3", "15", "final"]
    for r in table:
        label, rms, lo, hi, zero, nonfinite = r.split()
        per_shard = [s["state_stats"][label]["rms"] for s in manifest["shards"]]
        assert float(lo) == pytest.approx(min(per_shard), rel=1e-4)
        assert float(hi) == pytest.approx(max(per_shard), rel=1e-4)
        assert min(per_shard) <= float(rms) * (1 + 1e-4) and float(rms) <= max(per_shard) * (1 + 1e-4)
        assert zero == nonfinite == "0"


def test_inspect_hidden_names_a_manifest_without_statistics(tmp_path, target_model):
    extract_in_process(target_model, _rows()[:1], LAYERS, tmp_path, 64, 0)
    manifest = read_json(tmp_path / "manifest.json")
    for s in manifest["shards"]:
        del s["state_stats"]  # as extract wrote it before the statistics
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["inspect", "--hidden", str(tmp_path)])
    assert result.exit_code == 1 and "written before extract recorded per-layer statistics" in result.output
    assert len(load_sequences(tmp_path)) == 1  # training still reads it
    missing = CliRunner().invoke(main, ["inspect", "--hidden", str(tmp_path / "nothing")])
    assert missing.exit_code == 1 and "manifest.json: not found" in missing.output
    (tmp_path / "online").mkdir()
    (tmp_path / "online" / "manifest.json").write_text(json.dumps({"features": "online", "shards": []}))
    online = CliRunner().invoke(main, ["inspect", "--hidden", str(tmp_path / "online")])
    assert online.exit_code == 1 and "train.features is online, so extract stored no hidden states" in online.output
