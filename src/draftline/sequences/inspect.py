"""`draftline inspect`: a tokenized row as the drafter will see it, in the terminal; or the
stored hidden states' per-layer statistics.

    draftline inspect 3                     # row 3 of the tokenize stage's output
    draftline inspect --id humaneval-12     # a row by sequence id
    draftline inspect 3 --no-color          # supervised spans as [[...]] instead of colour
    draftline inspect --hidden              # RMS, all-zero and non-finite rows per layer (paths.hidden in dvc.yaml)
    draftline inspect --hidden DIR          # the same for another extract output

Supervised tokens (loss mask 1: what the target wrote, and its end-of-turn token) are
highlighted, the rest (system prompt, user turns, template markup) is dimmed. A wrong loss
mask is the failure peers' users report most, and it shows here at a glance: a highlighted
user turn, a dimmed answer, an end-of-turn token left out.

The hidden states' table comes from the manifest the extract stage wrote (state_stats.py
counts as it writes): a layer whose RMS is far from its neighbours', or shards whose RMS
spread widely, point at a target or backend that stored something other than it should.
"""

from __future__ import annotations

from pathlib import Path

import click
import pyarrow.parquet as pq

from .. import paths
from ..command import path_option
from ..io import read_json

OPEN, CLOSE = "[[", "]]"


def find_row(tokens: Path, index: int | None, row_id: str | None) -> tuple[int, dict]:
    """Row `index` (from 0), or the row whose id is `row_id`, read batch by batch."""
    if not tokens.exists():
        raise click.ClickException(f"{tokens}: not found (run `dvc repro tokenize` first)")
    seen = 0
    for batch in pq.ParquetFile(tokens).iter_batches(batch_size=1024):
        if row_id is not None:
            ids = batch.column("id").to_pylist()
            if row_id in ids:
                i = ids.index(row_id)
                return seen + i, batch.slice(i, 1).to_pylist()[0]
        elif index < seen + batch.num_rows:
            return index, batch.slice(index - seen, 1).to_pylist()[0]
        seen += batch.num_rows
    what = f"id {row_id!r}" if row_id is not None else f"row {index} (the file has {seen})"
    raise click.ClickException(f"{tokens}: no {what}")


def spans(loss_mask: list[int]) -> list[tuple[int, int, bool]]:
    """Runs of equal mask values: (start, end, supervised)."""
    out: list[tuple[int, int, bool]] = []
    for i, m in enumerate(loss_mask):
        if out and out[-1][2] == bool(m):
            out[-1] = (out[-1][0], i + 1, bool(m))
        else:
            out.append((i, i + 1, bool(m)))
    return out


def render(tok, row: dict, color: bool) -> str:
    """The row's text, each run decoded whole (so multi-byte characters stay intact),
    special tokens shown as they are."""
    parts = []
    for a, b, supervised in spans(row["loss_mask"]):
        text = tok.decode(row["input_ids"][a:b], skip_special_tokens=False)
        if color:
            parts.append(click.style(text, fg="green", bold=True, underline=True) if supervised
                         else click.style(text, dim=True))
        else:
            parts.append(f"{OPEN}{text}{CLOSE}" if supervised else text)
    return "".join(parts)


def summary(index: int, row: dict) -> str:
    n, sup = len(row["input_ids"]), sum(row["loss_mask"])
    runs = [s for s in spans(row["loss_mask"]) if s[2]]
    return (f"row {index} · id {row['id']} · split {row.get('split')} · {n} tokens, {sup} supervised "
            f"({sup / max(n, 1):.1%}) in {len(runs)} span(s): "
            + ", ".join(f"{a}-{b - 1}" for a, b, _ in runs))


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.5g}"


def hidden_table(folder: Path) -> list[str]:
    """The per-layer statistics in an extract output's manifest, as aligned text lines."""
    from ..hidden.state_stats import overall
    from ..hidden.store import MANIFEST

    manifest_path = Path(folder) / MANIFEST
    if not manifest_path.exists():
        raise click.ClickException(f"{manifest_path}: not found (run `dvc repro extract` first)")
    m = read_json(manifest_path)
    if m.get("features") == "online":
        raise click.ClickException(f"{manifest_path}: train.features is online, so extract stored no hidden states")
    if any("state_stats" not in s for s in m["shards"]):
        raise click.ClickException(f"{manifest_path}: written before extract recorded per-layer statistics; "
                                   "rerun extract (`dvc repro extract`) to have them")
    stats = overall(m["shards"])
    rows = [("layer", "rms", "shard rms min", "shard rms max", "all-zero rows", "non-finite rows")]
    rows += [(label, _num(st["rms"]), _num(st["rms_min"]), _num(st["rms_max"]), f"{st['zero_rows']:,}",
              f"{st['nonfinite_rows']:,}") for label, st in stats.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    stored = m["dtype"] + (", a float32 scale per token and layer; statistics before FP8 rounding"
                           if m.get("scales") else "")
    head = (f"{manifest_path}: {m['tokens']:,} tokens in {len(m['shards'])} shard(s), {m['bytes_per_token']:,} "
            f"B/token, {m['total_bytes'] / 1e9:.3f} GB; hidden {m['hidden_size']} ({stored}); a row is one "
            "token's state at one layer")
    return [head, *("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)]


@click.command("inspect")
@click.argument("row", type=click.IntRange(min=0), required=False)
@click.option("--id", "row_id", help="Pick the row by sequence id instead of position.")
@path_option("--tokens", "tokens", "Reads: the tokenize stage's rows.")
@path_option("--model", "target_model", "Reads: the target's tokenizer, to turn ids back into text.")
@click.option("--color/--no-color", default=None,
              help="Colour (supervised bold green, the rest dim) or [[supervised]] brackets.  "
                   "[default: colour on a terminal]")
# An optional value: `--hidden` alone reads dvc.yaml's paths.hidden ("" stands for it).
@click.option("--hidden", is_flag=False, flag_value="", default=None, type=click.Path(), metavar="[DIR]",
              help="Instead of a row: the stored hidden states' RMS, all-zero and non-finite rows per layer, "
                   "from DIR/manifest.json.  [default DIR: paths.hidden in dvc.yaml]")
def command(row, row_id, tokens, model, color, hidden):
    """Show a tokenized row, or (--hidden) hidden-state statistics.

    A row: its supervised tokens lit, the rest dimmed. --hidden: each stored layer's RMS and
    counts of all-zero and non-finite rows, from the extract stage's manifest."""
    if hidden is not None:
        if row is not None or row_id is not None:
            raise click.UsageError("give ROW, --id or --hidden, not two of them")
        click.echo("\n".join(hidden_table(Path(hidden) if hidden else paths.declared("hidden"))))
        return
    from ..target.load import load_tokenizer

    if row is not None and row_id is not None:
        raise click.UsageError("give ROW or --id, not both")
    index, data = find_row(tokens, 0 if row is None and row_id is None else row, row_id)
    color = click.get_text_stream("stdout").isatty() if color is None else color
    click.echo(summary(index, data))
    click.echo(render(load_tokenizer(model), data, color), color=color)
