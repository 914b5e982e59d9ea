"""`draftline inspect` shows exactly the supervised tokens: the answer and its end of turn."""

from click.testing import CliRunner

from draftline.cli import main
from draftline.io import write_parquet
from draftline.sequences.loss_mask import encode

CONV = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue is a colour."}]


def _rows(tokenizer):
    e = encode(tokenizer, CONV, ["stop"], 256)
    return [{"id": "p0", "split": "train", "input_ids": e.input_ids, "loss_mask": e.loss_mask},
            {"id": "p1", "split": "val", "input_ids": e.input_ids, "loss_mask": [0] * len(e.input_ids)}]


def test_plain_output_brackets_the_supervised_span(tmp_path, target_dir, tokenizer):
    write_parquet(tmp_path / "t.parquet", _rows(tokenizer))
    args = ["inspect", "--tokens", str(tmp_path / "t.parquet"), "--model", str(target_dir), "--no-color"]
    out = CliRunner().invoke(main, args).output
    summary, text = out.split("\n", 1)
    assert summary.startswith("row 0 · id p0 · split train") and "in 1 span(s)" in summary
    assert "[[Blue is a colour.<|im_end|>]]" in text  # the answer and its end-of-turn token, nothing else
    assert text.count("[[") == 1 and "Name a colour." in text.split("[[")[0]
    by_id = CliRunner().invoke(main, [*args, "--id", "p1"]).output
    assert by_id.startswith("row 1 · id p1") and "[[" not in by_id and "0 supervised" in by_id


def test_colour_dims_the_prompt_and_lights_the_answer(tmp_path, target_dir, tokenizer):
    write_parquet(tmp_path / "t.parquet", _rows(tokenizer))
    out = CliRunner().invoke(main, ["inspect", "0", "--tokens", str(tmp_path / "t.parquet"), "--model",
                                    str(target_dir), "--color"], color=True).output
    assert "\x1b[2m" in out  # dim
    assert "\x1b[32m\x1b[1m\x1b[4mBlue is a colour.<|im_end|>" in out  # green, bold, underlined


def test_a_missing_row_is_named(tmp_path, target_dir, tokenizer):
    write_parquet(tmp_path / "t.parquet", _rows(tokenizer))
    out = CliRunner().invoke(main, ["inspect", "7", "--tokens", str(tmp_path / "t.parquet"), "--model",
                                    str(target_dir)])
    assert out.exit_code == 1 and "no row 7 (the file has 2)" in out.output
