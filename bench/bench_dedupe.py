"""Near-duplicate removal: draftline at 10M prompts, and at 1M against datasketch's
MinHashLSH and rensa's RMinHashLSH (a Rust MinHash).

    .venv/bin/python bench/bench_dedupe.py [--n 10000000] [--compare-n 1000000] [--dup-rate 0.2]

Builds a corpus of synthetic prompts (Zipf-distributed vocabulary, sentences of 6-12
words) and plants near-duplicates of random originals at known rates: word edits
(1-2 words replaced, inserted or deleted), reorderings (two sentences swapped),
whitespace and case noise, and a mix of edit + noise. Truth: the planted copies are to
be dropped, the originals kept. Each method runs in its own process on the same corpus
and settings (shingle size, permutations, bands, threshold); wall time and peak RSS
are measured there, precision and recall here. datasketch is used as documented for
speed (permutations shared between MinHash objects, update_batch), with candidates kept
only when their estimated Jaccard passes the threshold, like draftline's links; rensa the
same way (RMinHash signatures, RMinHashLSH with the same bands, query then insert).

The 1M corpus is the one earlier runs used (seed 0). The 10M corpus is ten such blocks
(seeds 0-9), each with its own originals and planted copies, written block by block so
this process never holds 10M texts.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_corpus(n: int, dup_rate: float, seed: int = 0) -> tuple[list[str], np.ndarray, dict]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, rng.integers(3, 10))) for _ in range(30000)]
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()
    n_dup = int(n * dup_rate)
    n_orig = n - n_dup
    lens = rng.integers(15, 61, n_orig)
    idx = rng.choice(len(vocab), size=int(lens.sum()), p=p).tolist()
    cut = np.concatenate([[0], np.cumsum(lens)]).tolist()
    sent_len = rng.integers(6, 13, n_orig).tolist()
    origs = []  # each original as its sentences
    for i in range(n_orig):
        w = [vocab[j] for j in idx[cut[i] : cut[i + 1]]]
        k = sent_len[i]
        origs.append([" ".join(w[j : j + k]).capitalize() + "." for j in range(0, len(w), k)])
    kinds = ["edit", "reorder", "noise", "edit+noise"]
    plant = rng.integers(0, len(kinds), n_dup).tolist()
    src = rng.integers(0, n_orig, n_dup).tolist()
    n_edits = rng.integers(1, 3, n_dup).tolist()
    u = rng.random((n_dup, 6)).tolist()  # uniform draws for the edit choices
    seps = [" ", "  ", "\n", " \t "]
    dups = []
    for d in range(n_dup):
        kind, sents, r = kinds[plant[d]], origs[src[d]], u[d]
        if kind in ("edit", "edit+noise"):
            toks = " ".join(sents).split(" ")
            for e in range(n_edits[d]):
                op, at = int(r[2 * e] * 3), int(r[2 * e + 1] * len(toks))
                new = vocab[int(r[4] * len(vocab))]
                if op == 0:
                    toks[at] = new
                elif op == 1:
                    toks.insert(at, new)
                elif len(toks) > 3:
                    del toks[at]
            text = " ".join(toks)
        elif kind == "reorder" and len(sents) > 1:
            a = int(r[0] * (len(sents) - 1))
            text = " ".join(sents[:a] + [sents[a + 1], sents[a]] + sents[a + 2 :])
        else:
            text = " ".join(sents)
        if "noise" in kind:
            toks = text.split(" ")
            text = "".join(t + seps[(j * 7 + d) % 4] for j, t in enumerate(toks)).strip()
            text = text.upper() if r[5] < 0.3 else text.lower()
        dups.append(text)
    texts = [" ".join(s) for s in origs] + dups
    truth = np.zeros(n, bool)
    truth[n_orig:] = True  # copies come after every original: the original is first
    planted = {k: plant.count(i) for i, k in enumerate(kinds)}
    return texts, truth, planted


def run_draftline(corpus: Path, settings: dict) -> np.ndarray:
    from draftline.config.mix import NearDedupeParams
    from draftline.prompts.near_dedupe import near_duplicates

    texts = pq.read_table(corpus)["text"]
    p = NearDedupeParams(**{k: v for k, v in settings.items() if k != "seed"})
    drop, _ = near_duplicates(texts, p, settings["seed"])
    return drop


_W = re.compile(r"[^\W_]+")


def _shingles(text: str, k: int) -> list[str]:
    toks = _W.findall(unicodedata.normalize("NFKC", text).lower())
    return [" ".join(toks[j : j + k]) for j in range(max(len(toks) - k + 1, 1))] if toks else []


def _query_then_insert(texts: list[str], settings: dict, signature, lsh) -> np.ndarray:
    """The peers' documented loop: a text is dropped when a kept text found by the LSH
    query is similar enough; otherwise it is inserted and kept."""
    kept = {}
    drop = np.zeros(len(texts), bool)
    for i, t in enumerate(texts):
        sh = _shingles(t, settings["shingle"])
        if not sh:
            continue
        m = signature(sh)
        if any(m.jaccard(kept[c]) >= settings["threshold"] for c in lsh.query(m)):
            drop[i] = True
            continue
        lsh.insert(i, m)
        kept[i] = m
    return drop


def run_rensa(corpus: Path, settings: dict) -> np.ndarray:
    from rensa import RMinHash, RMinHashLSH

    num_perm = settings["num_perm"]

    def signature(sh: list[str]) -> RMinHash:
        m = RMinHash(num_perm=num_perm, seed=settings["seed"])
        m.update(sh)
        return m

    lsh = RMinHashLSH(threshold=settings["threshold"], num_perm=num_perm, num_bands=settings["bands"])
    return _query_then_insert(pq.read_table(corpus)["text"].to_pylist(), settings, signature, lsh)


def run_datasketch(corpus: Path, settings: dict) -> np.ndarray:
    from datasketch import MinHash, MinHashLSH

    num_perm, bands = settings["num_perm"], settings["bands"]
    first = MinHash(num_perm=num_perm, seed=settings["seed"])
    perms, scheme = first.permutations, first.scheme

    def signature(sh: list[str]) -> MinHash:
        m = MinHash(num_perm=num_perm, permutations=perms, scheme=scheme)
        m.update_batch([x.encode() for x in sh])
        return m

    lsh = MinHashLSH(num_perm=num_perm, params=(bands, num_perm // bands))
    return _query_then_insert(pq.read_table(corpus)["text"].to_pylist(), settings, signature, lsh)


def child(method: str, corpus: str, settings: str, out: str) -> None:
    t0 = time.perf_counter()
    runs = {"draftline": run_draftline, "datasketch": run_datasketch, "rensa": run_rensa}
    drop = runs[method](Path(corpus), json.loads(settings))
    wall = time.perf_counter() - t0
    np.save(out, drop)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": wall, "peak_rss_mb": peak}))


def write_corpus(path: Path, n: int, dup_rate: float) -> tuple[np.ndarray, dict]:
    """Blocks of up to 1M prompts (seed = block number) into one Parquet file; the truth."""
    truth, planted = [], {}
    with pq.ParquetWriter(path, pa.schema([("text", pa.large_string())])) as w:
        for b, lo in enumerate(range(0, n, 1_000_000)):
            texts, t, p = make_corpus(min(1_000_000, n - lo), dup_rate, seed=b)
            w.write_table(pa.table({"text": pa.array(texts, pa.large_string())}))
            truth.append(t)
            planted = {k: planted.get(k, 0) + v for k, v in p.items()}
    return np.concatenate(truth), planted


def measure(method: str, corpus: Path, truth: np.ndarray, settings: dict, out: Path) -> dict:
    res = subprocess.run([sys.executable, __file__, "--child", method, str(corpus), json.dumps(settings), str(out)],
                         capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(res.stderr[-2000:])
    m = json.loads(res.stdout.strip().splitlines()[-1])
    drop = np.load(out)
    tp = int((drop & truth).sum())
    m.update(method=method, n=len(truth), dropped=int(drop.sum()), precision=tp / max(int(drop.sum()), 1),
             recall=tp / int(truth.sum()))
    print(f"{method} at {len(truth):,}: {m}", file=sys.stderr, flush=True)
    return m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000_000, help="prompts for draftline alone (0: none)")
    ap.add_argument("--compare-n", type=int, default=1_000_000, help="prompts for every method")
    ap.add_argument("--dup-rate", type=float, default=0.2)
    ap.add_argument("--shingle", type=int, default=3)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--bands", type=int, default=32)
    ap.add_argument("--threshold", type=float, default=0.7)
    ap.add_argument("--methods", default="draftline,datasketch,rensa", help="at --compare-n")
    a = ap.parse_args()
    settings = {"shingle": a.shingle, "num_perm": a.num_perm, "bands": a.bands, "threshold": a.threshold, "seed": 0}
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n, methods in ((a.n, ["draftline"]), (a.compare_n, a.methods.split(","))):
            if not n:
                continue
            t0 = time.perf_counter()
            corpus = Path(d) / f"corpus-{n}.parquet"
            truth, planted = write_corpus(corpus, n, a.dup_rate)
            print(f"corpus: {n:,} prompts, planted {truth.sum():,} near-duplicates {planted} "
                  f"({time.perf_counter() - t0:.0f} s to build)", file=sys.stderr, flush=True)
            for method in methods:
                rows.append(measure(method, corpus, truth, settings, Path(d) / f"{method}.npy"))
            corpus.unlink()
    print(f"\nplanted near-duplicates: {a.dup_rate:.0%} of the prompts; shingle {a.shingle} words, "
          f"{a.num_perm} permutations, {a.bands} bands, threshold {a.threshold}\n")
    print("| prompts | method | wall time | peak RSS | dropped | precision | recall |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for m in rows:
        print(f"| {m['n']:,} | {m['method']} | {m['wall_s']:.1f} s | {m['peak_rss_mb']:,.0f} MB | {m['dropped']:,} | "
              f"{m['precision']:.4f} | {m['recall']:.4f} |")
    base = next((m for m in rows if m["method"] == "draftline" and m["n"] == a.compare_n), None)
    for m in rows:
        if base and m["n"] == a.compare_n and m is not base:
            print(f"at {a.compare_n:,}, {m['method']} takes {m['wall_s'] / base['wall_s']:.1f}x draftline's time "
                  f"and {m['peak_rss_mb'] / base['peak_rss_mb']:.1f}x its peak memory")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
    else:
        main()
