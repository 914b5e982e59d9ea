"""The README's results block names the run its numbers came from."""

import subprocess

from draftline.results import provenance, render_block
from draftline.revision import checkout


def test_the_block_names_the_commit_day_and_machine_of_the_run(tmp_path):
    bench = {"device": "AMD EPYC (2 threads)", "run": {"commit": "abc1234", "date": "2026-12-07"}, "greedy": {}}
    line = provenance(bench)
    assert "`make all` at commit `abc1234` on AMD EPYC (2 threads), 2026-12-07" in line
    assert "an unrecorded commit" in provenance({"greedy": {}})  # metrics from before the run was recorded
    (tmp_path / "benchmark.json").write_text('{"device": "X", "run": {"commit": "f00", "date": "2026-01-01"}}')
    block = render_block({k: tmp_path / f"{k}.json" for k in ("benchmark", "train", "regenerate", "extract",
                                                               "tokenize")})
    assert "at commit `f00` on X, 2026-01-01" in block.splitlines()[1]  # the prose is inside the generated block


def test_checkout_is_the_repositorys_head(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert checkout()["commit"] is None  # not a git checkout: unnamed, not an error
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
    run = checkout()
    assert head.startswith(run["commit"]) and len(run["commit"]) >= 7 and len(run["date"]) == 10
