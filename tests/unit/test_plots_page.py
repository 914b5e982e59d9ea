"""`draftline plots` (make plots): real `dvc plots show` on a tiny plot, into a page that
loads nothing from the network."""

from __future__ import annotations

import re
import subprocess
import sys

from click.testing import CliRunner

from draftline.cli import main


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
