"""Benchmark requests: later turns follow the target's own greedy answers, which the
target-alone run then reuses instead of decoding them twice."""

from draftline.config.benchmark import BenchmarkParams

from draftline.config.drafter import DrafterParams
from draftline.decode.chain import plain
from draftline.decode.measure import run_benchmark
from draftline.decode.requests import build_requests
from draftline.drafter.model import build_drafter, drafter_config

PROMPTS = [{"source": "mtbench", "id": "q1", "messages": [
    {"role": "user", "content": "Name a prime number."},
    {"role": "user", "content": "Now name a bigger one."}]}]


def test_turn_two_follows_the_reused_turn_one_answer(target_model, tokenizer):
    bp = BenchmarkParams(prompts_per_source=1, max_new_tokens=6)
    stop = [tokenizer.eos_token_id]
    first, second = build_requests(target_model, tokenizer, PROMPTS, bp, stop)
    assert first.answer.tokens == plain(target_model, first.input_ids, 6, stop).tokens
    assert second.answer is None  # nothing follows the last turn
    assert second.messages[1] == {"role": "assistant",
                                  "content": tokenizer.decode(first.answer.tokens, skip_special_tokens=True)}


def test_target_alone_rows_of_every_turn(target_model, tokenizer):
    bp = BenchmarkParams(prompts_per_source=1, max_new_tokens=6, baselines=[])
    cfg = drafter_config(target_model.config, DrafterParams(num_layers=1, block_size=4), [1, 27],
                         tokenizer.convert_tokens_to_ids("<empty_output>"))
    metrics, rows = run_benchmark(target_model, tokenizer, {"dflash": build_drafter(cfg, 0).eval()}, PROMPTS, bp,
                                  [tokenizer.eos_token_id], 4)
    target_rows = [r for r in rows if r["method"] == "target"]
    assert [r["turn"] for r in target_rows] == [1, 2]
    assert all(r["tokens"] > 0 and r["seconds"] > 0 for r in target_rows)
    assert metrics["mismatches"] == 0


def test_multi_turn_benchmarks_are_also_reported_per_turn(target_model, tokenizer):
    bp = BenchmarkParams(prompts_per_source=1, max_new_tokens=6, baselines=[])
    cfg = drafter_config(target_model.config, DrafterParams(num_layers=1, block_size=4), [1, 27],
                         tokenizer.convert_tokens_to_ids("<empty_output>"))
    prompts = PROMPTS + [{"source": "humaneval", "id": "h1",
                          "messages": [{"role": "user", "content": "def add(a, b):"}]}]
    metrics, rows = run_benchmark(target_model, tokenizer, {"dflash": build_drafter(cfg, 0).eval()}, prompts, bp,
                                  [tokenizer.eos_token_id], 4)
    greedy = metrics["greedy"]
    assert list(greedy) == ["humaneval", "mtbench", "mtbench_turn1", "mtbench_turn2", "all"]
    assert [greedy[k]["requests"] for k in greedy] == [1, 2, 1, 1, 3]
    for t in (1, 2):  # one request each: its mean tokens per step
        acc = next(r["acceptance"] for r in rows if r["method"] == "dflash" and r["source"] == "mtbench"
                   and r["turn"] == t)
        assert greedy[f"mtbench_turn{t}"]["dflash"]["tau"] == sum(acc) / len(acc)
