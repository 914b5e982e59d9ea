"""`draftline plots`: dvc.yaml's plots as one self-contained HTML page that opens offline.

    draftline plots                    # dvc plots show, then one offline page (make plots)
    draftline plots HEAD~1 workspace   # dvc plots diff HEAD~1 workspace: runs overlaid, same page

`dvc plots show` alone writes a page that loads vega, vega-lite and vega-embed from a CDN,
blank without network. This runs it with DVC's own page template (`--html-template`) with
the three scripts inlined from the pinned django-js-lib-vega-embed package (vega 5,
vega-lite 5, vega-embed 6: the majors DVC's specs are written for). The template has no
`{scripts}` placeholder, so DVC adds no CDN tags; nothing is fetched when the page opens.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

import click

from . import paths

SCRIPTS = ("vega5.js", "vega-lite5.js", "vega-embed6.js")  # load order: vega-lite and embed need vega

# DVC's default page (dvc_render.html.PAGE_HTML) with the scripts inlined. DVC fills
# {refresh_tag} and {plot_divs}; it requires {plot_divs}.
PAGE = """<!DOCTYPE html>
<html>
<head>
    <meta charset="utf-8">
    {refresh_tag}
    <title>draftline plots</title>
SCRIPTS
    <style>
        table {
            border-spacing: 15px;
        }
    </style>
</head>
<body>
    {plot_divs}
</body>
</html>"""


def template() -> str:
    """The page template with vega, vega-lite and vega-embed inlined (about 830 KB)."""
    folder = files("js_lib_vega_embed") / "static" / "js_lib_vega_embed"
    # "</script" inside a script would end it early; "<\/script" is the same JavaScript.
    inlined = ["<script>" + (folder / name).read_text(encoding="utf-8").replace("</script", "<\\/script") + "</script>"
               for name in SCRIPTS]
    return PAGE.replace("SCRIPTS", "\n".join(inlined), 1)


@click.command("plots")
@click.argument("revisions", nargs=-1)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Writes: index.html here [default: dvc.yaml paths.plots_page].")
def command(revisions, out):
    """dvc.yaml's plots as one HTML page that opens offline.

    No REVISIONS: `dvc plots show` of the workspace. REVISIONS (commits, branches,
    experiments, `workspace`): `dvc plots diff` of them, overlaid."""
    out = out or paths.declared("plots_page")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "template.html"
        page.write_text(template(), encoding="utf-8")
        cmd = ["plots", "diff", *revisions] if revisions else ["plots", "show"]
        done = subprocess.run([sys.executable, "-m", "dvc", *cmd, "--html-template", str(page), "-o", str(out)])
    if done.returncode != 0:
        raise click.ClickException(f"dvc {' '.join(cmd)} failed (exit {done.returncode})")
