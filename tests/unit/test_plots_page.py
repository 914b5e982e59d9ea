"""`draftline plots` (make plots): real `dvc plots show` and `dvc plots diff` into a page that
loads nothing from the network and opens with the revisions, the date and the headline
metrics; the project's own charts drawn by its templates, titled."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml
from click.testing import CliRunner
from conftest import ROOT

from draftline.cli import main
from draftline.metrics_table import Headline
from draftline.plots_page import Revision, compared, header, resolve, template

GIT_USER = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _git(cmd: str, cwd: Path) -> str:
    return subprocess.run(f"git {cmd}", cwd=cwd, shell=True, check=True, capture_output=True, text=True).stdout.strip()


def test_the_page_inlines_vega_and_loads_no_script_from_the_network(tmp_path, monkeypatch):
    (tmp_path / "loss.tsv").write_text("step\tloss\n1\t2.5\n2\t1.75\n3\t1.125\n")
    (tmp_path / "dvc.yaml").write_text("plots:\n  - loss.tsv:\n      x: step\n      y: loss\n")
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["plots", "--out", "html"])
    assert result.exit_code == 0, result.output

    page = (tmp_path / "html" / "index.html").read_text()
    srcs = re.findall(r"<script[^>]*\bsrc\s*=\s*[\"']?([^\"' >]+)", page, re.I)
    assert not [s for s in srcs if re.match(r"(https?:)?//", s)], srcs  # no CDN (DVC's default page has three)
    assert "cdn.jsdelivr.net" not in page
    # vega, vega-lite and vega-embed, inlined in that order, then the plot's spec and data
    assert page.index('.vega={})') < page.index('.vegaLite={}') < page.index(').vegaEmbed=')
    assert 'var n="5.23.0"' in page  # vega-lite 5, the major DVC's specs are written for
    assert "vegaEmbed(" in page and "1.125" in page
    # no git, no declared metrics: the header says so and leaves the table out
    assert "<h1>draftline plots</h1>" in page and "not in a git repository" in page
    assert '<table class="headline">' not in page


def _project(tmp_path: Path) -> Path:
    """This repository's dvc.yaml, plot templates, committed plots data and metrics, in git."""
    for rel in ("dvc.yaml", "data/metrics", "data/plots", "data/train_live"):
        src, dest = ROOT / rel, tmp_path / rel
        if src.is_dir():
            shutil.copytree(src, dest, ignore=shutil.ignore_patterns("html"))
        else:
            shutil.copy(src, dest)
    _git("init -q", tmp_path)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=tmp_path, check=True)
    shutil.copytree(ROOT / ".dvc/plots", tmp_path / ".dvc/plots")
    _git("add -A && git commit -qm one", tmp_path)
    return tmp_path


def test_the_projects_charts_render_titled_and_the_page_opens_with_the_revisions(tmp_path, monkeypatch):
    for k, v in GIT_USER.items():
        monkeypatch.setenv(k, v)
    root = _project(tmp_path)
    charts = {plot_id: props for entry in yaml.safe_load((root / "dvc.yaml").read_text())["plots"]
              for plot_id, props in entry.items()}
    shown = json.loads(subprocess.run([sys.executable, "-m", "dvc", "plots", "show", "--json"], cwd=root,
                                      check=True, capture_output=True, text=True).stdout)
    assert not shown.get("errors") and set(shown["data"]) == set(charts)
    for plot_id, (rendered,) in shown["data"].items():
        spec = rendered["content"]
        assert spec["title"] == charts[plot_id]["title"], plot_id  # not the file's path
        assert "series" in json.dumps(spec["encoding"]) + json.dumps(spec.get("layer")), plot_id  # a colour each
        assert spec["data"]["values"], plot_id

    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["plots", "--out", "html"])
    assert result.exit_code == 0, result.output
    page = (root / "html" / "index.html").read_text()
    head = page[page.index("<header>"):page.index("</header>")]
    sha = _git("rev-parse --short HEAD", root)
    assert f"HEAD <code>{sha}</code>, no uncommitted changes" in head
    made = re.search(r"<dt>Made</dt><dd>(\d{4}-\d\d-\d\d \d\d:\d\d) UTC</dd>", head)
    assert made, head
    made = datetime.strptime(made[1], "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc)
    assert abs(datetime.now(timezone.utc) - made) < timedelta(minutes=5)
    tau = json.loads((root / "data/metrics/benchmark.json").read_text())["tau"]
    assert f"<td>tau, all benchmarks</td><td>{tau:.3f}</td>" in head
    for props in charts.values():
        assert json.dumps(props["title"]) in page

    # one revision: dvc plots diff draws it against the workspace, and the header says which is which
    bench = json.loads((root / "data/metrics/benchmark.json").read_text())
    (root / "data/metrics/benchmark.json").write_text(json.dumps({**bench, "tau": bench["tau"] + 0.25}))
    result = CliRunner().invoke(main, ["plots", "HEAD", "--out", "diff"])
    assert result.exit_code == 0, result.output
    head = (root / "diff" / "index.html").read_text().split("</header>")[0]
    assert f"<code>HEAD</code>: <code>{sha}</code>" in head
    assert f"<code>workspace</code>: HEAD <code>{sha}</code> with uncommitted changes" in head
    assert "<th>HEAD</th><th>workspace</th><th>change</th>" in head and "<td>+0.250</td>" in head
    assert "benchmark device: HEAD " in head


def test_revisions_resolve_to_their_commits_experiments_included(tmp_path, monkeypatch):
    for k, v in GIT_USER.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")  # dvc exp runs `python`
    (tmp_path / "params.yaml").write_text("lr: 0.5\n")
    (tmp_path / "step.py").write_text("import yaml\nlr = yaml.safe_load(open('params.yaml'))['lr']\n"
                                      "open('loss.tsv', 'w').write(f'step\\tloss\\n1\\t{lr}\\n')\n")
    (tmp_path / "dvc.yaml").write_text("stages:\n  s:\n    cmd: python step.py\n    deps: [step.py]\n"
                                       "    params: [lr]\n    outs: [loss.tsv: {cache: false}]\n")
    _git("init -q", tmp_path)
    for cmd in (["init", "-q"], ["repro", "-q"]):
        subprocess.run([sys.executable, "-m", "dvc", *cmd], cwd=tmp_path, check=True)
    _git("add -A && git commit -qm base", tmp_path)
    subprocess.run([sys.executable, "-m", "dvc", "exp", "run", "-q", "-n", "faster", "-S", "lr=0.25"],
                   cwd=tmp_path, check=True)

    base = resolve("HEAD", tmp_path)
    assert base == Revision("HEAD", _git("rev-parse --short HEAD", tmp_path))
    exp = resolve("faster", tmp_path)
    assert exp.commit and exp.commit != base.commit
    assert _git(f"show {exp.commit}:params.yaml", tmp_path) == "lr: 0.25"
    assert resolve("no-such-rev", tmp_path).commit is None


def test_the_header_escapes_what_it_shows_and_dates_the_page_in_utc():
    revs = [Revision("<b>exp</b>", "abc1234"), Revision("workspace", "abc1234", dirty=True), Revision("gone", None)]
    metrics = Headline(["metric", "<b>exp</b>", "workspace", "gone"], [["tau & co", "1.500", "<i>", "-"]],
                       {"workspace": "CPU <2 threads>"})
    made = datetime(2025, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    page = header(revs, made, metrics)
    assert "<b>" not in page and "<i>" not in page
    assert "<code>&lt;b&gt;exp&lt;/b&gt;</code>: <code>abc1234</code>" in page
    assert "<code>gone</code> (not a commit here)" in page
    assert "2025-03-04 03:06 UTC" in page  # when it was made, in UTC
    assert "<td>tau &amp; co</td>" in page and "workspace CPU &lt;2 threads&gt;" in page
    assert "<table" not in header(revs[1:2], made, None)
    # dvc fills the page's {plot_divs} by plain replacement: a revision named so stays text
    top = template(header([Revision("{plot_divs}", None)], made, None)).split("<main>")[0]
    assert "{plot_divs}" not in top and "&#123;plot_divs}" in top


def test_one_revision_is_compared_with_the_workspace_as_dvc_plots_diff_does():
    assert compared([]) == ["workspace"]
    assert compared(["HEAD~1"]) == ["HEAD~1", "workspace"]
    assert compared(["workspace"]) == ["workspace"]
    assert compared(["a", "b", "c"]) == ["a", "b", "c"]
