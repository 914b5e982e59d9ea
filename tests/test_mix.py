from collections import Counter

from draftline import mix
from draftline.config import MixParams


def _row(i, text, cat="chat", source="s"):
    return {"id": f"{source}-{i}", "source": source, "category": cat, "role": "train",
            "messages": [{"role": "user", "content": text}]}


def test_exact_dedupe_is_normalised():
    rows = [_row(0, "Hello   World"), _row(1, "hello world"), _row(2, "other")]
    kept, dup = mix.dedupe(rows)
    assert dup == 1 and [r["id"] for r in kept] == ["s-0", "s-2"]


def test_decontamination_drops_overlap_and_keeps_neighbours():
    bench = _row(0, "Write a function that returns the sum of all even numbers in a list of integers "
                    "given as input", source="bench")
    planted = _row(1, "Please help: write a function that returns the sum of all even numbers in a list "
                      "of integers given as input, thanks")
    neighbour = _row(2, "Write a function that returns the product of all odd numbers in a tuple")
    kept, dropped = mix.decontaminate([planted, neighbour], [bench], 13)
    assert [r["id"] for r in kept] == ["s-2"]
    assert dropped == Counter({"s": 1})


def test_short_eval_prompt_is_caught_verbatim():
    bench = _row(0, "What is the capital of France?", source="bench")
    kept, _ = mix.decontaminate([_row(1, "Quick one: what is the capital of France?"), _row(2, "Capital of Peru?")],
                                [bench], 13)
    assert [r["id"] for r in kept] == ["s-2"]


def test_mix_hits_weights_and_is_seeded():
    rows = [_row(i, f"c{i}", "coding") for i in range(100)] + [_row(100 + i, f"m{i}", "math") for i in range(100)]
    p = MixParams(category_weights={"coding": 3, "math": 1}, total=80, seed=1)
    out, warns = mix.mix_by_category(rows, p)
    assert Counter(r["category"] for r in out) == {"coding": 60, "math": 20} and not warns
    again, _ = mix.mix_by_category(rows, p)
    assert [r["id"] for r in out] == [r["id"] for r in again]


def test_mix_warns_when_category_is_short():
    rows = [_row(i, f"c{i}", "coding") for i in range(10)] + [_row(100 + i, f"m{i}", "math") for i in range(100)]
    out, warns = mix.mix_by_category(rows, MixParams(category_weights={"coding": 1, "math": 1}, total=40))
    assert len(warns) == 1 and "coding" in warns[0]


def test_split_is_stable():
    rows = [_row(i, f"t{i}") for i in range(400)]
    a = mix.split(rows, 0.1, 0)
    b = mix.split(rows[:200], 0.1, 0)
    assert [r["split"] for r in a[:200]] == [r["split"] for r in b]
    assert 20 < sum(r["split"] == "val" for r in a) < 60
