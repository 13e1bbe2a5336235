# Two commands on a fresh machine: `make preview` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= dev

.PHONY: install preview test lint lint-workflows typecheck unit references clean

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

unit: install references
	@command -v promtool >/dev/null 2>&1 || echo "note: promtool is not installed, so the alert-rule tests skip (apt-get install prometheus; .ci/run does)"
	$(BIN)/pytest -n auto -q

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
