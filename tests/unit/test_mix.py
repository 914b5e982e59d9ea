from collections import Counter

from draftline.config.mix import MixParams
from draftline.prompts import decontaminate as D
from draftline.prompts import dedupe as DD
from draftline.prompts import sampling as M
from draftline.prompts import schema


def _row(i, text, cat="chat", source="s"):
    return {"id": f"{source}-{i}", "source": source, "category": cat, "role": "train",
            "messages": [{"role": "user", "content": text}]}


def _frame(rows):
    """Rows as the mix stage holds them: a frame with the user text beside the messages."""
    return schema.frame(rows).with_columns(text=schema.user_text())


def _ids(df):
    return df["id"].to_list()


def test_exact_dedupe_is_normalised():
    rows = [_row(0, "Hello   World"), _row(1, "hello world"), _row(2, "other")]
    kept, dup = DD.dedupe(_frame(rows))
    assert dup == 1 and _ids(kept) == ["s-0", "s-2"]


def test_decontamination_drops_overlap_and_keeps_neighbours():
    bench = _row(0, "Write a function that returns the sum of all even numbers in a list of integers "
                    "given as input", source="bench")
    planted = _row(1, "Please help: write a function that returns the sum of all even numbers in a list "
                      "of integers given as input, thanks")
    neighbour = _row(2, "Write a function that returns the product of all odd numbers in a tuple")
    kept, dropped = D.decontaminate(_frame([planted, neighbour]), _frame([bench]), 13)
    assert _ids(kept) == ["s-2"]
    assert dropped == Counter({"s": 1})


def test_short_eval_prompt_is_caught_verbatim():
    bench = _row(0, "What is the capital of France?", source="bench")
    kept, _ = D.decontaminate(_frame([_row(1, "Quick one: what is the capital of France?"),
                                      _row(2, "Capital of Peru?")]), _frame([bench]), 13)
    assert _ids(kept) == ["s-2"]


def test_mix_hits_weights_and_is_seeded():
    rows = [_row(i, f"c{i}", "coding") for i in range(100)] + [_row(100 + i, f"m{i}", "math") for i in range(100)]
    p = MixParams(category_weights={"coding": 3, "math": 1}, total=80, seed=1)
    out, warns = M.mix_by_category(_frame(rows), p)
    assert Counter(out["category"].to_list()) == {"coding": 60, "math": 20} and not warns
    again, _ = M.mix_by_category(_frame(rows), p)
    assert _ids(out) == _ids(again)


def test_mix_warns_when_category_is_short():
    rows = [_row(i, f"c{i}", "coding") for i in range(10)] + [_row(100 + i, f"m{i}", "math") for i in range(100)]
    out, warns = M.mix_by_category(_frame(rows), MixParams(category_weights={"coding": 1, "math": 1}, total=40))
    assert len(warns) == 1 and "coding" in warns[0]


def test_category_without_prompts_is_left_out_with_a_warning():
    rows = [_row(i, f"c{i}", "coding") for i in range(30)] + [_row(100 + i, f"m{i}", "math") for i in range(10)]
    out, warns = M.mix_by_category(_frame(rows), MixParams(category_weights={"coding": 1, "math": 1, "humaneval": 2}))
    assert Counter(out["category"].to_list()) == {"coding": 10, "math": 10}
    assert warns == ["category 'humaneval' has no prompts; left out of the mix"]


def test_split_is_stable():
    rows = [_row(i, f"t{i}") for i in range(400)]
    a = M.split(_frame(rows), 0.1, 0)["split"].to_list()
    b = M.split(_frame(rows[:200]), 0.1, 0)["split"].to_list()
    assert a[:200] == b
    assert 20 < a.count("val") < 60


def test_near_duplicates_found_with_precision_and_recall():
    import random as _r

    from draftline.config.mix import NearDedupeParams

    rng = _r.Random(0)
    vocab = [f"w{i}" for i in range(3000)]
    originals = [" ".join(rng.choice(vocab) for _ in range(rng.randint(20, 50))) for _ in range(400)]
    planted = []
    for i in range(100):
        words_ = originals[i].split()
        words_[rng.randrange(len(words_))] = "edited"  # one word changed
        text = " ".join(words_)
        planted.append(text.upper() if i % 2 else "  " + text.replace(" ", "\n", 2))  # case/whitespace noise
    rows = [_row(i, t) for i, t in enumerate(originals)] + [_row(1000 + i, t, source="dup") for i, t in enumerate(planted)]
    kept, dropped, stats = DD.near_dedupe(_frame(rows), NearDedupeParams(), seed=0)
    removed = {r["id"] for r in rows} - set(_ids(kept))
    truth = {f"dup-{1000 + i}" for i in range(100)}
    precision = len(removed & truth) / max(len(removed), 1)
    recall = len(removed & truth) / len(truth)
    assert precision == 1.0 and recall >= 0.9, (precision, recall)
    assert dropped == Counter({"dup": len(removed)})
    again, _, _ = DD.near_dedupe(_frame(rows), NearDedupeParams(), seed=0)
    assert _ids(again) == _ids(kept)  # deterministic
    # Signed in chunks (a scratch file each), the same texts are dropped.
    chunked, _, _ = DD.near_dedupe(_frame(rows), NearDedupeParams(), seed=0, chunk=37)
    assert _ids(chunked) == _ids(kept)


def test_mix_hits_weights_within_one_percent():
    rows = [_row(i, f"t{i}", cat) for i, cat in enumerate(["coding"] * 5000 + ["math"] * 4000 + ["chat"] * 3000)]
    weights = {"coding": 1.2, "math": 1.0, "chat": 0.8}
    out, warns = M.mix_by_category(_frame(rows), MixParams(category_weights=weights, total=6000, seed=3))
    got = Counter(out["category"].to_list())
    assert not warns and abs(sum(got.values()) - 6000) <= 3
    for cat, w in weights.items():
        assert abs(got[cat] / sum(got.values()) - w / sum(weights.values())) < 0.01
    assert out["id"].n_unique() == out.height  # without replacement


def test_followups_share_choice_and_stability():
    from draftline.config.mix import FollowupParams

    p = FollowupParams(fraction=0.5, turns={"chat": ["Say it shorter.", "Give an example."]})
    rows = [{"id": f"r{i}", "category": "chat" if i % 3 else "math",
             "messages": [{"role": "user", "content": f"question {i}"}]} for i in range(900)]
    rows.append({"id": "two", "category": "chat", "messages": [{"role": "user", "content": "a"},
                                                                 {"role": "user", "content": "b"}]})
    frame = schema.frame(rows)
    out, added = M.add_followups(frame, p, seed=0)
    out = out.to_dicts()
    chat = [r for r in out[:900] if r["category"] == "chat"]
    got = [r for r in chat if len(r["messages"]) == 2]
    assert added == Counter({"chat": len(got)})
    assert 0.42 < len(got) / len(chat) < 0.58
    assert all(len(r["messages"]) == 1 for r in out[:900] if r["category"] == "math")  # no turns listed
    assert len(out[900]["messages"]) == 2  # already multi-turn: untouched
    assert {r["messages"][1]["content"] for r in got} == {"Say it shorter.", "Give an example."}
    assert all(r["messages"][1]["role"] == "user" for r in got)
    # A pure function of (seed, id): a subset of the rows gets the same choices.
    again, _ = M.add_followups(frame.gather_every(7), p, seed=0)
    assert again.to_dicts() == out[::7][: again.height]
    assert frame["messages"][0].to_list() == [{"role": "user", "content": "question 0"}]  # input not mutated
    assert M.add_followups(frame, FollowupParams(), seed=0)[0].equals(frame)


def test_near_dedupe_scratch_is_removed_and_a_killed_runs_swept(tmp_path, monkeypatch):
    import subprocess
    import tempfile

    from draftline.config.mix import NearDedupeParams
    from draftline.io import _host
    from draftline.prompts.near_dedupe import near_duplicates

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".draftline-near-dedupe.{_host()}-{dead.pid}.tmp"
    stale.mkdir()
    (stale / "signatures").write_bytes(b"half-written")
    drop, stats = near_duplicates(["a b c d e f", "a b c d e f", "x y z"], NearDedupeParams(), seed=0, chunk=2)
    assert drop.tolist() == [False, True, False] and stats["scratch_bytes"] > 0
    assert list(tmp_path.iterdir()) == []  # the stale folder swept, this run's own removed
