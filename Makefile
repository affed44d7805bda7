# Two commands: `make lab` (the course) and `make test` (everything CI runs).
# Each creates or reuses .venv and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: lab test lint install serve bench notebooks clean-data traces traces-stop

$(BIN)/.hango-installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

install: $(BIN)/.hango-installed

lab: install
	IPYKERNEL_CELL_NAME="<IPY-INPUT>" $(BIN)/jupyter lab notebooks/

lint: install
	$(BIN)/ruff check hango tests bench
	$(BIN)/mypy --strict hango

test: lint
	IPYKERNEL_CELL_NAME="<IPY-INPUT>" $(BIN)/pytest -q --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg tests notebooks

notebooks: install  ## after changing hango: re-execute the course, commit the outputs
	$(BIN)/python notebooks/refresh.py

serve: install
	$(BIN)/hango serve

bench: install
	for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean-data:
	$(BIN)/hango db stop || true
	rm -rf .hango

traces:  ## Arize Phoenix (trace viewer, no Docker) in .traces-venv, on 127.0.0.1:6006
	$(PYTHON) deploy/phoenix/traces.py start

traces-stop:
	$(PYTHON) deploy/phoenix/traces.py stop
