# Runwright: `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Importing litellm must never reach the network.
export LITELLM_LOCAL_MODEL_COST_MAP := True
# Test processes (pytest-xdist); a file's tests stay together on one. 0: in this process.
TEST_PROCESSES ?= 2

.PHONY: help install browser js chat demo test test-fast screenshots lint fmt dist bench soak lock worker beat flower local-up local-down clean

help: ## Show the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

install: $(BIN)/.installed ## Create .venv with the locked, hash-checked dependencies

browser: ## Install Debian's chromium and chromedriver for the browser tests (apt-get; needs root)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

# The tests' Node tooling (tests/js): the AI SDK's and AG-UI's clients read the chat streams.
# Without Node, those tests skip and say why.
tests/js/node_modules/.installed: tests/js/package.json tests/js/package-lock.json
	@if command -v npm >/dev/null; then \
	  cd tests/js && npm ci --ignore-scripts --no-audit --no-fund && touch node_modules/.installed; \
	else echo "npm is not installed: the tests that read the chat streams under Node will skip"; fi

js: tests/js/node_modules/.installed ## Install the tests' Node packages from tests/js/package-lock.json (npm ci)

chat: install ## The chat example: the page, a worker and the local stack (examples/chat/)
	$(BIN)/python -m examples.chat

demo: install ## Run the demo end to end (local stack, worker, beat, approval, a killed worker)
	$(BIN)/runwright demo

test: install browser js ## Run the tests (Postgres from RUNWRIGHT_DATABASE_URL, else the local stack; a Redis of their own: docs/testing.md)
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile

test-fast: install ## Run the unit tests alone: no subprocess, no service, in seconds (tests/unit)
	@began=$$(date +%s%N); $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit; status=$$?; \
	  echo "make test-fast: $$(( ($$(date +%s%N) - began) / 1000000 )) ms"; exit $$status

screenshots: install browser ## Retake the console's screenshots in docs/images/ (browser tests, real workers)
	RUNWRIGHT_SCREENSHOTS=$(CURDIR)/docs/images $(BIN)/python -m pytest -q tests/e2e/test_console_browser.py

lint: install ## Lint, format check and strict type check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: install ## Format the code
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# With the locked, hash-checked setuptools and wheel of .venv (no isolation: nothing
# fetched at build time). Building the sdist writes runwright.egg-info into the
# checkout; left there, it would be a second, stale runwright for any process
# with the checkout on its path.
dist: install ## Build the wheel and the sdist into dist/ (python -m build; see CONTRIBUTING.md)
	$(BIN)/python -m build --no-isolation --outdir dist .
	rm -rf runwright.egg-info

bench: install ## Run the benchmarks; results land in bench/results/
	$(BIN)/python -m bench

soak: install ## Chaos soak, 10 min: workers killed and stopped, Redis, the broker and Postgres cut while runs start (MINUTES=3 for less)
	$(BIN)/python -m bench.soak --minutes $${MINUTES:-10}

lock: ## Re-resolve requirements.lock from pyproject.toml (needs uv; dev includes the otel and metrics extras)
	uv pip compile pyproject.toml --extra dev --generate-hashes --python-version 3.11 -o requirements.lock

worker: install ## Start a worker (threads pool; scale by starting more)
	$(BIN)/celery -A tasks worker -l INFO

beat: install ## Start beat, which runs tick() every RUNWRIGHT_TICK_SECONDS
	$(BIN)/celery -A tasks beat -l INFO

flower: install ## Start Flower on :5555 (FLOWER_USER / FLOWER_PASSWORD for basic auth)
	$(BIN)/celery -A tasks flower --port=5555 --basic-auth=$${FLOWER_USER:-admin}:$${FLOWER_PASSWORD:?set FLOWER_PASSWORD}

local-up: install ## Start the local stack (embedded Postgres and Redis under .runwright/)
	$(BIN)/runwright local up

local-down: install ## Stop the local stack
	$(BIN)/runwright local down

clean: ## Remove the virtualenv, caches and the local stack's data
	-$(BIN)/runwright local down
	rm -rf $(VENV) .runwright .mypy_cache .ruff_cache .pytest_cache bench/results/*.json build dist
