"""dvc.yaml's charts (make plots): each declared once, in the top-level `plots:`, with a title,
axis labels and a template of .dvc/plots/; every curve the stages write is drawn, none twice."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import yaml
from conftest import ROOT

from draftline import paths

DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())
DECLARED = {k: v.as_posix() for k, v in paths.all_declared(ROOT / "dvc.yaml").items()}
TEMPLATES = ROOT / ".dvc" / "plots"  # where dvc looks up `template: <name>`


def _resolve(text: str) -> str:
    return re.sub(r"\$\{paths\.(\w+)\}", lambda m: DECLARED[m[1]], text)


def _charts() -> dict[str, dict]:
    return {plot_id: props for entry in DVC["plots"] for plot_id, props in entry.items()}


def _series(props: dict) -> list[tuple[str, str]]:
    """(file, column) of each series a chart draws."""
    return [(_resolve(file), col) for file, cols in props["y"].items()
            for col in ([cols] if isinstance(cols, str) else cols)]


def _columns(file: Path) -> list[str]:
    return file.read_text().splitlines()[0].split("\t")


def test_every_chart_has_a_title_axis_labels_and_a_template_of_the_project():
    charts = _charts()
    assert len(charts) >= 10
    for plot_id, props in charts.items():
        assert {"title", "x_label", "y_label", "template", "x", "y"} <= set(props), plot_id
        assert (TEMPLATES / f"{props['template']}.json").is_file(), plot_id
        # named, not a file: dvc titles a chart by its id where no title is given
        for name in (plot_id, props["title"]):
            assert "/" not in name and not name.endswith((".tsv", ".csv", ".json")), name
        assert isinstance(props["y"], dict), f"{plot_id}: y names its file(s): {{file: column(s)}}"


def test_no_stage_declares_plots_and_every_drawn_file_is_an_uncached_stage_output():
    outs = []
    for name, stage in DVC["stages"].items():
        assert "plots" not in stage, f"stage {name}: its plots are drawn by the top-level `plots:` only"
        for out in stage.get("outs", []):
            if isinstance(out, dict):
                ((path, props),) = out.items()
                if props.get("cache") is False:
                    outs.append(_resolve(path))
    for plot_id, props in _charts().items():
        for file, _ in _series(props):
            assert any(file == out or file.startswith(out + "/") for out in outs), f"{plot_id}: {file}"


def test_each_curve_is_drawn_once_and_every_written_column_is_drawn():
    charts = _charts()
    drawn = Counter(s for props in charts.values() for s in _series(props))
    assert [s for s, n in drawn.items() if n > 1] == []
    # the committed outputs: DVCLive's curves (held-out ones included) and the stages' TSVs
    live = ROOT / DECLARED["train_live"] / "plots" / "metrics"
    files = {f.relative_to(ROOT).as_posix() for f in live.rglob("*.tsv")}
    files |= {file for file, _ in drawn}
    x = {file: props["x"] for props in charts.values() for file, _ in _series(props)}
    for file in sorted(files):
        assert file in x, f"{file}: drawn by no chart"
        want = set(_columns(ROOT / file)) - {x[file], "timestamp"}
        assert {col for f, col in drawn if f == file} == want, file


def test_the_templates_fill_dvcs_anchors_and_bind_no_input():
    for name in {props["template"] for props in _charts().values()}:
        text = (TEMPLATES / f"{name}.json").read_text()
        json.loads(text)
        for anchor in ("DATA", "X", "Y", "TITLE", "X_LABEL", "Y_LABEL"):
            assert f"<DVC_METRIC_{anchor}>" in text, (name, anchor)
        # dvc fills only these; an optional anchor (<DVC_METRIC_COLOR>, ...) makes it drop the
        # rows' `filename` and `field`, which the templates colour the series by
        assert set(re.findall(r"<DVC_METRIC_(\w+)>", text)) == {"DATA", "X", "Y", "TITLE", "X_LABEL", "Y_LABEL"}
        assert '"bind"' not in text and "smooth" not in text, name  # no slider under the chart
