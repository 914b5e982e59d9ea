"""`draftline doctor`, the gate before the GPU hours: it passes on the pipeline as it is on
the embedded default and the tiny Qwen3.6 and Kimi-K2.6 layouts, and fails naming the cause
on each planted fault (layer ids shifted by one between extraction and decoding, a wrong
mask id in the export, a served block size that differs from the export's). The faults are
planted on the embedded target (real weights). Where the overfit drafter is accepted anyway
(one short row can be drafted from its tokens alone), the doctor names the difference
between the contract trained under and the export's; where it is not, it decodes again with
each mismatch undone and names the one that restores full acceptance."""

import json
import shutil

import pytest
import yaml
from click.testing import CliRunner
from conftest import ROOT
from tiny_layouts import QWEN36_VOCAB, kimi26_target, qwen36_target

from draftline.cli import main
from draftline.drafter import model as drafter_model
from draftline.hidden import capture
from draftline.io import write_parquet
from draftline.presets import merged
from draftline.sequences.loss_mask import encode
from draftline.target.load import load_tokenizer

# A fault shows on one row as well as on two: one row, four blocks, keeps the suite short.
FAULT = ("--rows", "1", "--new-tokens", "16")
PROMPTS = ["Write a Python function that adds two numbers.", "What is the capital of France?"]

LAYOUTS = {
    "embedded": (None, {}),
    "qwen3.6": (qwen36_target, {"mask_token": QWEN36_VOCAB - 1, "num_layers": 2,
                                "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8}),
    "kimi-k2.6": (kimi26_target, {"mask_token": "[UNK]", "num_layers": 2, "intermediate_size": 32,
                                  "target_layer_ids": [0, 1]}),
}


def _cli(args: list[str]):
    return CliRunner().invoke(main, args, catch_exceptions=False)


_BUILT: dict = {}


def _inputs(layout: str, tmp_path_factory):
    """params.yaml, the target stage's folder and info.json, and tokenized rows of two
    prompts, for one layout (built once per session)."""
    if layout in _BUILT:
        return _BUILT[layout]
    build, drafter = LAYOUTS[layout]
    folder = tmp_path_factory.mktemp(layout.replace(".", ""))
    params = merged(ROOT / "presets" / "smoke.yaml", ROOT / "params.yaml") if build else \
        yaml.safe_load((ROOT / "params.yaml").read_text())
    if build:
        params["target"]["source"] = str(build(folder / "source"))
    params["drafter"] |= drafter
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    model, info = folder / "target/model", folder / "target/info.json"
    result = _cli(["--params", str(folder / "params.yaml"), "target", "--model", str(model), "--info", str(info)])
    assert result.exit_code == 0, result.output
    tok = load_tokenizer(model)
    rows = []
    for i, p in enumerate(PROMPTS):
        e = encode(tok, [{"role": "user", "content": p}, {"role": "assistant", "content": "Sure."}], ["stop"], 512)
        rows.append({"id": f"r{i}", "split": "train", "input_ids": e.input_ids, "loss_mask": e.loss_mask})
    write_parquet(folder / "tokens.parquet", rows)
    _BUILT[layout] = folder
    return folder


@pytest.fixture(params=sorted(LAYOUTS))
def inputs(request, tmp_path_factory):
    return request.param, _inputs(request.param, tmp_path_factory)


@pytest.fixture
def embedded(tmp_path_factory):
    return _inputs("embedded", tmp_path_factory)


def _doctor(folder, *extra):
    """The doctor's run, its output printed (pytest -rP shows it)."""
    result = _cli(["--params", str(folder / "params.yaml"), "doctor", "--model", str(folder / "target/model"),
                 "--info", str(folder / "target/info.json"), "--tokens", str(folder / "tokens.parquet"), *extra])
    print(result.output)
    return result


def _block_size(folder) -> int:
    return yaml.safe_load((folder / "params.yaml").read_text())["drafter"]["block_size"]


def test_the_doctor_passes_on_the_pipeline_as_it_is(inputs, tmp_path):
    layout, folder = inputs
    result = _doctor(folder, "--keep", str(tmp_path / "export"))
    assert result.exit_code == 0, result.output
    assert "doctor: pass: every block fully accepted, both decoders agree" in result.output
    assert "the decoders agree" in result.output
    cfg = json.loads((tmp_path / "export/config.json").read_text())
    assert cfg["block_size"] == _block_size(folder)


def test_the_doctor_stores_the_states_as_extract_will(embedded, tmp_path):
    """extract.state_dtype: float8_e4m3fn: the doctor's rows go through FP8 storage too, and
    its feature check allows FP8's rounding, not more."""
    params = yaml.safe_load((embedded / "params.yaml").read_text())
    params["extract"]["state_dtype"] = "float8_e4m3fn"
    folder = shutil.copytree(embedded, tmp_path / "fp8", ignore=shutil.ignore_patterns("source"))
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    result = _doctor(folder)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "features: the states trained on" in x)
    assert "(float8_e4m3fn)" in line and 0.003 < float(line.split("RMS difference ")[1].split()[0]) < 0.06, line


def test_layer_ids_shifted_by_one_in_extraction_are_named(embedded, monkeypatch):
    """The classic off-by-one: the extractor stores transformers' hidden_states[i] (the
    output of layer i - 1) as layer i, while the engines read the output of layer i."""
    folder = embedded
    info = json.loads((folder / "target/info.json").read_text())

    class OffByOne(capture.Capture):
        def __init__(self, model, layer_ids, record):
            super().__init__(model, [i - 1 for i in layer_ids], record)

    monkeypatch.setattr("draftline.doctor.overfit.Capture", OffByOne)
    result = _doctor(folder, *FAULT)
    assert result.exit_code == 2, result.output
    assert "cause: target layer ids shifted by one between extraction and decoding" in result.output
    assert f"{[i - 1 for i in info['target_layer_ids']]}" in result.output.splitlines()[-1]


def test_a_wrong_mask_id_in_the_export_is_named(embedded, monkeypatch):
    folder = embedded
    real = drafter_model.serving_fields

    def wrong_mask(*args):
        fields = real(*args)
        fields["dflash_config"]["mask_token_id"] -= 1
        return fields

    monkeypatch.setattr(drafter_model, "serving_fields", wrong_mask)
    result = _doctor(folder, *FAULT)
    assert result.exit_code == 2, result.output
    assert "cause: mask token: trained with id" in result.output


def test_a_served_block_size_other_than_the_exports_is_named(embedded):
    folder = embedded
    B = _block_size(folder)
    result = _doctor(folder, *FAULT, "--serve-block-size", str(2 * B))
    assert result.exit_code == 2, result.output
    assert f"cause: block size: trained with blocks of {B}, served with {2 * B}" in result.output
