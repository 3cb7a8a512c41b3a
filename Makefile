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

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
