"""`draftline plots`: dvc.yaml's plots as one self-contained HTML page that opens offline.

    draftline plots                    # dvc plots show, then one offline page (make plots)
    draftline plots HEAD~1 workspace   # dvc plots diff HEAD~1 workspace: runs overlaid, same page

`dvc plots show` alone writes a page that loads vega, vega-lite and vega-embed from a CDN,
blank without network. This runs it with DVC's own page template (`--html-template`) with
the three scripts inlined from the pinned django-js-lib-vega-embed package (vega 5,
vega-lite 5, vega-embed 6: the majors DVC's specs are written for). The template has no
`{scripts}` placeholder, so DVC adds no CDN tags; nothing is fetched when the page opens.

The page opens with what it shows: the revisions (each one's commit), when it was made and
the headline metrics of each revision (metrics_table.py); the charts follow in a grid, each
drawn by a template of .dvc/plots/ as dvc.yaml's top-level `plots:` declares it.
"""

from __future__ import annotations

import html
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from importlib.resources import files
from pathlib import Path

import click

from . import paths
from .metrics_table import WORKSPACE, Headline, headline

SCRIPTS = ("vega5.js", "vega-lite5.js", "vega-embed6.js")  # load order: vega-lite and embed need vega

STYLE = """
        body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 15px;
               color: #1f2328; margin: 24px 32px; }
        header { display: flex; flex-wrap: wrap; gap: 8px 56px; align-items: flex-start; margin-bottom: 24px; }
        h1 { font-size: 28px; margin: 0 0 12px; }
        dl { display: grid; grid-template-columns: max-content auto; gap: 4px 16px; margin: 0; }
        dt { color: #59636e; }
        dd { margin: 0; }
        dd ul { margin: 0; padding: 0; list-style: none; }
        code { font-size: 14px; }
        table.headline { border-collapse: collapse; font-size: 14px; }
        table.headline th, table.headline td { padding: 3px 12px; border-bottom: 1px solid #d1d9e0; }
        table.headline th { text-align: right; }
        table.headline td { text-align: right; font-variant-numeric: tabular-nums; }
        table.headline th:first-child, table.headline td:first-child { text-align: left; }
        table.headline caption { caption-side: bottom; text-align: left; color: #59636e; padding-top: 6px; }
        main { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 20px; }
        main > div { min-width: 0; border: 1px solid #d1d9e0; border-radius: 6px; padding: 12px 16px; }
        main .vega-embed { display: block; width: 100%; }
"""

# DVC's default page (dvc_render.html.PAGE_HTML) with the scripts inlined, a header and a
# grid. DVC fills {refresh_tag} and {plot_divs} by plain replacement; it requires {plot_divs}.
PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    {refresh_tag}
    <title>draftline plots</title>
SCRIPTS
    <style>STYLE    </style>
</head>
<body>
HEADER
<main>
    {plot_divs}
</main>
</body>
</html>"""


@dataclass(frozen=True)
class Revision:
    name: str  # as dvc plots names it: `workspace`, a branch, a commit, an experiment
    commit: str | None  # its short sha (the workspace: HEAD's); None: not a git revision here
    dirty: bool = False  # the workspace only: tracked files differ from HEAD


def _git(args: list[str], root: Path) -> str | None:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def resolve(name: str, root: Path = Path(".")) -> Revision:
    """A revision with its short sha; the workspace with HEAD's and whether it differs."""
    if name == WORKSPACE:
        status = _git(["status", "--porcelain", "--untracked-files=no"], root)
        return Revision(name, _git(["rev-parse", "--short", "--verify", "-q", "HEAD"], root), bool(status))
    commit = _git(["rev-parse", "--short", "--verify", "-q", f"{name}^{{commit}}"], root)
    if commit is None:  # a dvc experiment: a ref refs/exps/<baseline sha, split>/<name>, no git revision
        commit = _git(["for-each-ref", "--count=1", "--format=%(objectname:short)", f"refs/exps/*/*/{name}"], root)
    return Revision(name, commit or None)


def compared(revisions: list[str]) -> list[str]:
    """The revisions `dvc plots diff REVISIONS` draws: one alone is drawn against the workspace."""
    if len(revisions) == 1 and revisions[0] != WORKSPACE:
        return [*revisions, WORKSPACE]
    return list(revisions) or [WORKSPACE]


def _describe(rev: Revision) -> str:
    name = f"<code>{html.escape(rev.name)}</code>"
    if rev.name == WORKSPACE:
        if rev.commit is None:
            return f"{name} (not in a git repository)"
        state = " with uncommitted changes to tracked files" if rev.dirty else ", no uncommitted changes"
        return f"{name}: HEAD <code>{html.escape(rev.commit)}</code>{state}"
    if rev.commit is None:
        return f"{name} (not a commit here)"
    return f"{name}: <code>{html.escape(rev.commit)}</code>"


def _table(metrics: Headline) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in metrics.header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>\n"
                   for row in metrics.rows)
    named = len(metrics.header) > 2  # several revisions: whose device is whose
    devices = ", ".join(f"{rev} {device}" if named else device for rev, device in metrics.devices.items())
    caption = f"<caption>benchmark device: {html.escape(devices)}</caption>" if devices else ""
    return f'<table class="headline">{caption}<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table>'


def header(revisions: list[Revision], made: datetime, metrics: Headline | None) -> str:
    """The page's opening: title, the revisions drawn, when (UTC), the headline metrics."""
    revs = "".join(f"<li>{_describe(r)}</li>" for r in revisions)
    when = made.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    about = (f"<div><h1>draftline plots</h1>\n<dl><dt>{'Revisions' if len(revisions) > 1 else 'Revision'}</dt>"
             f"<dd><ul>{revs}</ul></dd>\n<dt>Made</dt><dd>{when}</dd></dl></div>")
    return f"<header>\n{about}\n{_table(metrics) if metrics else ''}\n</header>"


def headline_metrics(revs: list[Revision], root: Path = Path(".")) -> Headline | None:
    """The headline table of these revisions, each read at its commit (an experiment's name is
    no git revision) and named as given; None in a project that declares no metrics files."""
    at = [r.commit if r.commit and r.name != WORKSPACE else r.name for r in revs]
    try:
        metrics = headline(at, root)
    except paths.PathsError:
        return None
    names = dict(zip(at, (r.name for r in revs)))
    return replace(metrics, header=[metrics.header[0], *names.values(), *metrics.header[1 + len(revs):]],
                   devices={names[rev]: device for rev, device in metrics.devices.items()})


def template(top: str = "") -> str:
    """The page template with vega, vega-lite and vega-embed inlined (about 830 KB) and `top`
    (HTML) above the charts."""
    folder = files("js_lib_vega_embed") / "static" / "js_lib_vega_embed"
    # "</script" inside a script would end it early; "<\/script" is the same JavaScript.
    inlined = ["<script>" + (folder / name).read_text(encoding="utf-8").replace("</script", "<\\/script") + "</script>"
               for name in SCRIPTS]
    # the header before the scripts go in: their text must not be searched for HEADER; and no
    # brace of it may read as DVC's {plot_divs} (a revision's name is the user's text)
    page = PAGE.replace("STYLE", STYLE, 1).replace("HEADER", top.replace("{", "&#123;"), 1)
    return page.replace("SCRIPTS", "\n".join(inlined), 1)


@click.command("plots")
@click.argument("revisions", nargs=-1)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Writes: index.html here [default: dvc.yaml paths.plots_page].")
def command(revisions, out):
    """dvc.yaml's plots as one HTML page that opens offline.

    No REVISIONS: `dvc plots show` of the workspace. REVISIONS (commits, branches,
    experiments, `workspace`): `dvc plots diff` of them, overlaid. The page opens with the
    revisions, the date and their headline metrics."""
    out = out or paths.declared("plots_page")
    revs = [resolve(r) for r in compared(list(revisions))]
    top = header(revs, datetime.now(timezone.utc), headline_metrics(revs))
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "template.html"
        page.write_text(template(top), encoding="utf-8")
        cmd = ["plots", "diff", *revisions] if revisions else ["plots", "show"]
        done = subprocess.run([sys.executable, "-m", "dvc", *cmd, "--html-template", str(page), "-o", str(out)])
    if done.returncode != 0:
        raise click.ClickException(f"dvc {' '.join(cmd)} failed (exit {done.returncode})")
