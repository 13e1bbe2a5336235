# Two commands on a fresh machine: `make preview` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STACK ?= dev

.PHONY: install preview test lint typecheck unit clean

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

unit: install
	$(BIN)/pytest -n auto -q

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
