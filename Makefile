# streamwhisper: `make run` sets up .venv and transcribes a sample on the default model;
# `make test` sets up .venv (with the test extras) and runs the whole test suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# the evaluation set beside the repository: only the benchmark targets read it
SHARED ?= ../shared/data
SAMPLE ?= tests/data/audio/en_jfk.flac

.PHONY: setup setup-test system-packages run test test-fast test-avx2 lint bench-streaming bench-offline bench-env clean

$(VENV)/.setup: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.setup-test: $(VENV)/.setup
	$(PIP) install --quiet -e '.[test,base]'
	touch $@

setup: $(VENV)/.setup

setup-test: $(VENV)/.setup-test

# libportaudio2, chromium, haproxy and nginx: installed with apt-get as root, else one line naming the command
system-packages:
	@sh tools/system_packages.sh $(PYTHON)

run: setup
	$(VENV)/bin/streamwhisper transcribe $(SAMPLE)

test: system-packages setup-test
	$(PY) -m pytest -q

test-fast: system-packages setup-test
	$(PY) -m pytest -q -m "not slow"

# The whole suite on the AVX2 code paths (torch, MKL, oneDNN and fbgemm's int8 kernels), as an
# AVX2-only CPU takes them, on a CPU that has AVX-512 too
AVX2_ONLY := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2
test-avx2: system-packages setup-test
	$(AVX2_ONLY) $(PY) -m pytest -q

lint: setup-test
	$(PIP) install --quiet ruff mypy
	$(VENV)/bin/ruff check streamwhisper tests benchmarks
	$(VENV)/bin/mypy streamwhisper

bench-streaming: setup-test
	$(PY) benchmarks/streaming.py --manifest $(SHARED)/eval/manifest.tsv --category longform --category read_en

# Benchmark-only venv for the peer engines (faster-whisper, openai-whisper): never a project dependency.
# openai-whisper goes in with --no-deps: its metadata pulls triton (GPU-only) on Linux; see benchmarks/requirements-peers.txt.
BENCH_VENV := .bench-venv
OPENAI_WHISPER := openai-whisper==20250625
OFFLINE_ARGS ?= --peers

$(BENCH_VENV)/.setup: pyproject.toml benchmarks/requirements-peers.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/pip install --quiet torch==2.13.0 -r benchmarks/requirements-peers.txt
	$(BENCH_VENV)/bin/pip install --quiet --no-deps $(OPENAI_WHISPER)
	$(BENCH_VENV)/bin/pip install --quiet -e '.[base,bench]'
	touch $@

bench-env: $(BENCH_VENV)/.setup

bench-offline: setup bench-env
	$(PIP) install --quiet -e '.[base,bench]'
	$(PY) benchmarks/offline.py $(OFFLINE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
