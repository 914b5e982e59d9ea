import copy

import pytest
import yaml
from conftest import ROOT

from draftline.config.base import ParamsError

from draftline.config.drafter import DrafterParams

from draftline.config.params import load_params, parse_params
from draftline.target.info import choose_layers
from draftline.target.load import TargetError


@pytest.fixture
def params():
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_default_params_are_valid():
    p = load_params(ROOT / "params.yaml")
    assert p.drafter.block_size >= 2
    assert {s.role for s in p.download.sources} <= {"train", "eval", "split"}
    # every benchmark source keeps prompts out of training for the benchmark to score
    assert all(s.role == "eval" or (s.role == "split" and s.holdout >= p.benchmark.prompts_per_source)
               for s in p.download.sources if s.kind in ("humaneval", "mtbench"))


def test_unknown_key_is_named(params):
    params["train"]["learning_rate"] = 1e-3
    with pytest.raises(ParamsError, match=r"unknown key 'train.learning_rate'"):
        parse_params(params)


def test_unknown_section_is_named(params):
    params["trian"] = {}
    with pytest.raises(ParamsError, match="unknown key 'trian'"):
        parse_params(params)


@pytest.mark.parametrize("section,key,value,fragment", [
    ("train", "lr", "fast", "train.lr"),
    ("train", "num_anchors", -4, "train.num_anchors"),
    ("regenerate", "max_new_tokens", 0, "regenerate.max_new_tokens"),
    ("drafter", "block_size", 1, "drafter.block_size"),
    ("mix", "val_fraction", 1.5, "mix.val_fraction"),
    ("regenerate", "backend", "ollama", "regenerate.backend"),
    ("chat", "thinking", "maybe", "chat.thinking"),
    ("regenerate", "max_error_rate", 1.5, "regenerate.max_error_rate"),
    ("mix", "near_dedupe", {"num_perm": 100, "bands": 32}, "mix.near_dedupe"),
    ("mix", "near_dedupe", {"threshold": 0}, "mix.near_dedupe.threshold"),
    ("benchmark", "tree_budgets", [0], "benchmark.tree_budgets.0"),
])
def test_bad_values_name_the_key(params, section, key, value, fragment):
    bad = copy.deepcopy(params)
    bad[section][key] = value
    with pytest.raises(ParamsError, match=fragment.replace(".", r"\.")):
        parse_params(bad)


@pytest.mark.parametrize("bench,fragment", [
    ({"tree_budgets": [8, 8]}, "tree_budgets: repeated budget"),
    ({"tree_budgets": [8], "temperatures": [0.7]}, "tree_budgets: draft trees are greedy only"),
])
def test_bad_tree_budgets_are_named(params, bench, fragment):
    params["benchmark"].update(bench)
    with pytest.raises(ParamsError, match=r"benchmark.*" + fragment):
        parse_params(params)


def test_source_without_path_is_rejected(params):
    params["download"]["sources"].append({"name": "mine", "kind": "local"})
    with pytest.raises(ParamsError, match="download.sources.3"):
        parse_params(params)


def test_layer_id_out_of_range_is_named():
    with pytest.raises(TargetError, match=r"drafter.target_layer_ids: layer 30 out of range"):
        choose_layers(DrafterParams(num_layers=2, target_layer_ids=[3, 30]), 30)


def test_default_layers_follow_zlab():
    from dflash.model import build_target_layer_ids as ref

    for n, l in [(30, 1), (30, 2), (36, 5), (64, 5)]:
        assert choose_layers(DrafterParams(num_layers=l, target_layer_ids=None), n) == ref(n, l)


def test_missing_params_file(tmp_path):
    with pytest.raises(ParamsError, match="file not found"):
        load_params(tmp_path / "nope.yaml")


@pytest.mark.parametrize("key,value,fragment", [
    ("urls", ["gpu-node:8000/v1"], "regenerate.openai.urls.0"),
    ("urls", [], "regenerate.openai.urls"),
    ("urls", ["http://a/v1", "http://a/v1"], "the same endpoint is listed twice"),
    ("max_in_flight", 0, "regenerate.openai.max_in_flight"),
    ("api_key", "sk-123", "unknown key 'regenerate.openai.api_key'"),  # keys never go in params
])
def test_bad_openai_values_name_the_key(params, key, value, fragment):
    bad = copy.deepcopy(params)
    bad["regenerate"]["openai"][key] = value
    with pytest.raises(ParamsError, match=fragment.replace(".", r"\.")):
        parse_params(bad)


def test_presets_validate_and_become_dvc_flags(tmp_path):
    import yaml

    from draftline.presets import flags

    large = ROOT / "presets" / "large.yaml"
    out = flags(large, ROOT / "params.yaml")
    over = yaml.safe_load(large.read_text())
    assert len(out) == sum(len(section) for section in over.values())
    # a list value comes quoted for the shell ("-S 'benchmark.tree_budgets=[32]'")
    assert all(f"{section}.{key}=" in " ".join(out) for section, keys in over.items() for key in keys)
    lists = tmp_path / "lists.yaml"
    lists.write_text("benchmark: {temperatures: [0.0, 1.0]}\ntrain: {lr: 0.001}\n")
    assert flags(lists, ROOT / "params.yaml") == ["-S 'benchmark.temperatures=[0.0, 1.0]'", "-S train.lr=0.001"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {epochz: 3}\n")
    with pytest.raises(ParamsError, match="unknown key 'train.epochz'"):
        flags(bad, ROOT / "params.yaml")


def test_chat_thinking_takes_yaml_on_and_off_as_meant():
    # `thinking: on` in YAML 1.1 is the boolean true; the switch means "on", not an error.
    from draftline.config.chat import ChatParams

    assert [ChatParams.model_validate({"thinking": v}).thinking for v in (True, False, "default")] == \
        ["on", "off", "default"]
    with pytest.raises(ValueError):
        ChatParams.model_validate({"thinking": 1})


def test_exponents_without_a_dot_are_floats_as_dvc_reads_them(tmp_path):
    """`lr: 3e-4` written by hand: YAML 1.1 (PyYAML) reads it as text, YAML 1.2 (DVC's
    parser, and so `dvc exp run -S train.lr=3e-4`) as a float; the params file reads as DVC
    does. A quoted "3e-4" stays text and is refused, naming the key."""
    text = (ROOT / "params.yaml").read_text()
    assert "\n  lr: " in text
    head, tail = text.split("\n  lr: ", 1)
    (tmp_path / "params.yaml").write_text(head + "\n  lr: 3e-4" + tail[tail.index("\n"):])
    assert load_params(tmp_path / "params.yaml").train.lr == 3e-4
    (tmp_path / "params.yaml").write_text(head + '\n  lr: "3e-4"' + tail[tail.index("\n"):])
    with pytest.raises(ParamsError, match=r"train.lr: .*'3e-4'"):
        load_params(tmp_path / "params.yaml")
