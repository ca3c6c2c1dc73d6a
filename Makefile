# Tandem: `make setup` once, then `.venv/bin/tandem serve`; `make test` runs the suite.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.tandem-installed

.PHONY: setup test lint serve

setup:
	@bash scripts/setup.sh

test:
	@$(PY) -m pytest -q
	@$(PY) -m pytest -q -m endpoint
	@$(PY) -m pytest -q -m embed_endpoint
	@$(PY) -m pytest -q -m smol
	@$(PY) -m pytest -q -m hybrid tests/test_hybrid.py
	@$(PY) -m pytest -q -m clients tests/clients
	@$(PY) -m pytest -q -m replicas tests/replicas
	@$(PY) -m tests.vllm_suite.run off
	@$(PY) -m tests.vllm_suite.run on

lint:
	@$(VENV)/bin/ruff check .

serve:
	@$(VENV)/bin/tandem serve
