"""In-process regeneration batches: bounded by rows and by tokens; a later turn that outgrows
the context ends its conversation."""

from draftline.regenerate.drive import next_turns, token_batches
from draftline.regenerate.jobs import Job


def _jobs(widths):
    return [Job(f"k{i}", {}, 0, w) for i, w in enumerate(widths)]


def test_batches_are_bounded_by_tokens_and_rows():
    widths = [10] * 5 + [100] + [10] * 3 + [1000] + [20] * 12 + [None] * 3
    batches = token_batches(_jobs(widths), batch_size=8, batch_tokens=200)
    assert [j for b in batches for j in b] == _jobs(widths)  # every job once, order kept
    for b in batches:
        assert len(b) <= 8
        assert len(b) == 1 or len(b) * max(j.tokens or 0 for j in b) <= 200
    # the 100-token row ends the first batch (6 x 100 > 200) and takes one more row (3 x 100 > 200)
    assert [len(b) for b in batches] == [5, 2, 2, 1, 8, 7]
    assert [j.tokens for j in batches[3]] == [1000]  # wider than the budget: alone


def test_without_a_token_budget_batches_are_rows():
    assert [len(b) for b in token_batches(_jobs([500] * 10), 4)] == [4, 4, 2]


def test_a_later_turn_over_the_context_ends_the_conversation():
    prompts = [[{"role": "user", "content": "a"}, {"role": "user", "content": "b" * 50}],
               [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "user", "content": "c"}]]
    convs, cursor, cut = [[], []], [0, 0], {}

    def over(conv):
        n = sum(len(m["content"]) for m in conv)
        return n if n > 20 else None

    assert next_turns(prompts, convs, cursor, over, cut) == [0, 1]  # first turns are not measured here
    for c in convs:
        c.append({"role": "assistant", "content": "x" * 5})
    assert next_turns(prompts, convs, cursor, over, cut) == [1]
    assert cut == {0: (2, 56)} and [m["role"] for m in convs[0]] == ["user", "assistant"]
    assert next_turns(prompts, convs, cursor, over, cut) == []
