# Two commands set everything up on a fresh machine: `make run` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: setup run test test-fast lint format bench learning worker clean

setup: $(STAMP)

$(STAMP): requirements.txt
	@command -v $(PY) >/dev/null 2>&1 || { echo "make: $(PY) not found (set PY=python3.11)"; exit 1; }
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -m pip install -q -r requirements.txt 2>&1 | grep -v "is ignored" || true
	@$(BIN)/python -c "import torch, transformers, django, channels, celery" \
		|| { echo "make: the install into $(VENV) failed"; exit 1; }
	@touch $(STAMP)

# Embedded default: SQLite under var/, in-memory channel layer, runs executed in-process.
run: setup
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py serve --host $(HOST) --port $(PORT) --demo

# The suite on every core (pytest-xdist): a test file stays on one process, so its
# module-scoped servers, browsers and models are built once; files are handed out in
# the order tests/conftest.py puts them (the long ones first; pyproject.toml's
# addopts). TEST_JOBS=0: one process.
TEST_JOBS ?= auto
test: setup
	$(BIN)/python -m pytest -n $(TEST_JOBS)

test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not browser and not services"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Production-path worker (needs DATABASE_URL and REDIS_URL).
worker: setup
	$(BIN)/celery -A dashboard worker -Q gpu,cpu -c 1 --prefetch-multiplier 1 -l info

bench: setup
	$(BIN)/python bench/trainer_bench.py
	$(BIN)/python bench/gpu_bench.py

learning: setup
	$(BIN)/python bench/learning.py

clean:
	rm -rf var/ .pytest_cache .ruff_cache artifacts/
