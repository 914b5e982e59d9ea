"""What the regenerate stage's agreement check separates, on the embedded SmolLM2 target.

The real stage (`draftline.regenerate.stage.run`, in process) answers the same held prompts
with each backend, and its check scores `regenerate.check_rows` of the answers with the
in-process target (the HF conversion of the package's Q4_1 GGUF, in `regenerate.dtype`):

- `hf`: the in-process target against itself (what `make all` runs);
- llama.cpp (llama-cpp-python's server on loopback) serving the package's Q4_1 GGUF, the
  file the HF target was converted from;
- llama.cpp serving that GGUF requantized (Q8_0, Q4_0, Q2_K: llama.cpp's own quantizer);
- llama.cpp serving the Q4_1 GGUF with another chat template (`--chat_format`).

Prints a markdown table: top-1 agreement, mean and p99 |Δ log-prob|, and whether the default
`regenerate.min_top1_agreement` passes it. Needs `make test`'s llama.cpp build.

    .venv/bin/python bench/bench_agreement.py --rows 32 --max-new-tokens 128
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click
import yaml
from _setup import PARAMS, ROOT, path

sys.path.insert(0, str(ROOT / "tests"))  # the llama.cpp server and requantizer live with the tests
from llama_server import LlamaServer, requantized  # noqa: E402

CASES = [("hf backend (itself)", None, None), ("llama.cpp Q4_1 (the converted file)", "Q4_1", []),
         ("llama.cpp Q8_0", "Q8_0", []), ("llama.cpp Q4_0", "Q4_0", []), ("llama.cpp Q2_K", "Q2_K", []),
         ("llama.cpp Q4_1, template chatml", "Q4_1", ["--chat_format", "chatml"]),
         ("llama.cpp Q4_1, template zephyr", "Q4_1", ["--chat_format", "zephyr"])]


def _prompts(n: int, folder: Path) -> Path:
    """n seed prompts spread over the file (every k-th), as the mix stage's rows."""
    import json

    from draftline.io import write_parquet

    lines = (path("prompt_files") / "prompts.jsonl").read_text().splitlines()
    seed = [json.loads(line) for line in lines if line.strip()]
    step = max(len(seed) // n, 1)
    rows = [{"id": f"seed-{i}", "source": "seed", "category": r.get("category", "chat"), "split": "train",
             "messages": r["messages"]} for i, r in list(enumerate(seed))[::step][:n]]
    write_parquet(folder / "mix.parquet", rows)
    return folder / "mix.parquet"


def _case(target: Path, prompts: Path, folder: Path, n: int, new_tokens: int, gguf, extra) -> dict:
    import torch

    from draftline.config.params import parse_params
    from draftline.io import read_json
    from draftline.regenerate.stage import run

    params = yaml.safe_load(PARAMS.read_text())
    params["regenerate"] |= {"max_new_tokens": new_tokens, "check_rows": n}
    server = None
    if gguf is not None:
        model = None if gguf == "Q4_1" else requantized(gguf)
        server = LlamaServer(n_ctx=2048, model=model, extra=extra).wait()
        params["regenerate"] |= {"backend": "openai", "max_context": 2048}
        params["regenerate"]["openai"] |= {"urls": [server.url], "max_in_flight": 2, "startup_timeout_s": 60.0}
    try:
        run(parse_params(params), target, prompts, folder / "out", folder / "work", folder / "logs",
            folder / "m.json", device=torch.device("cpu"))
    except RuntimeError as e:  # below the threshold: the figures are in the metrics all the same
        print(f"  the stage failed: {str(e)[:160]}", file=sys.stderr)
    finally:
        if server is not None:
            server.stop()
    return read_json(folder / "m.json")["agreement"]


@click.command()
@click.option("--rows", default=32, show_default=True, help="Prompts answered and checked per case.")
@click.option("--max-new-tokens", default=128, show_default=True)
def main(rows: int, max_new_tokens: int) -> None:
    from draftline.config.regenerate import RegenerateParams

    target = path("target_model")
    if not target.exists():
        raise click.ClickException(f"{target}: run `make all` first (the target stage's folder)")
    threshold = RegenerateParams().min_top1_agreement
    lines = ["| backend | top-1 | mean \\|Δ log-prob\\| | p99 | tokens | passes min_top1_agreement "
             f"{threshold} |", "| --- | --- | --- | --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as tmp:
        prompts = _prompts(rows, Path(tmp))
        for i, (name, gguf, extra) in enumerate(CASES):
            m = _case(target, prompts, Path(tmp) / str(i), rows, max_new_tokens, gguf, extra)
            lines.append(f"| {name} | {m['top1']} | {m['mean_abs_dlogprob']} | {m['p99_abs_dlogprob']} | "
                         f"{m['tokens']} | {'yes' if m['top1'] is not None and m['top1'] >= threshold else 'no'} |")
            print(lines[-1], file=sys.stderr)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
