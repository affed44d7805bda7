# Two commands: `make lab` (the course) and `make test` (everything CI runs).
# Each creates or reuses .venv and installs what it needs; `make doctor` says what is wrong.
PYTHON   ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
LAB_ARGS ?=
# jupyter refuses to run as root (containers, devcontainers) unless told it may.
ROOT_ARGS := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: lab test lint install install-lab serve bench notebooks clean-data doctor venv traces traces-stop mutation test-counts

# A .venv made by a Python older than 3.11 (or a broken one) is rebuilt, with a message saying so.
$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	  echo "hango needs Python 3.11 or newer; '$(PYTHON)' is $$($(PYTHON) --version 2>&1)."; \
	  echo "Install one and run, e.g.: make lab PYTHON=python3.12"; exit 1; }
	$(PYTHON) -m venv $(VENV)

venv:
	@if [ -e $(BIN)/python ] && ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then \
	  echo "$(VENV) was made with $$($(BIN)/python --version 2>&1 || echo a Python that no longer runs): removing it (rm -rf $(VENV)) and starting again."; \
	  rm -rf $(VENV); fi
	@$(MAKE) --no-print-directory $(BIN)/python

# The course needs only the notebooks extra; tests need the dev set.
$(BIN)/.hango-lab: pyproject.toml | venv
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[notebooks]'
	$(BIN)/python -m hango.doctor --lab-settings
	touch $@

$(BIN)/.hango-installed: pyproject.toml | venv
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m hango.doctor --lab-settings
	touch $@ $(BIN)/.hango-lab

install-lab: $(BIN)/.hango-lab
install: $(BIN)/.hango-installed

# JupyterLab on the whole project, opened on notebook 00: the chapter (docs/learning/) is one
# click away and every notebook links to its section. A file argument alone would make its folder
# (notebooks/) the lab's root, where ../docs links cannot be opened: root_dir says the project.
# LAB_ARGS reaches jupyter, e.g.
#   make lab LAB_ARGS="--no-browser --port 8890"
lab: install-lab
	IPYKERNEL_CELL_NAME="<IPY-INPUT>" $(BIN)/jupyter lab $(ROOT_ARGS) --ServerApp.root_dir=. \
	  $(LAB_ARGS) notebooks/00-setup-and-tour.ipynb

doctor: venv
	@$(BIN)/python -m hango.doctor

lint: install
	$(BIN)/ruff check hango tests bench
	$(BIN)/mypy --strict hango

test: lint
	IPYKERNEL_CELL_NAME="<IPY-INPUT>" $(BIN)/pytest -q --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg tests notebooks

test-counts: install  ## how many tests each file holds, and in all (the docs copy no counts)
	@$(BIN)/pytest --collect-only -q -p no:randomly tests | awk -F'::' '/::/ {print $$1}' \
	  | sort | uniq -c | awk '{print; n += $$1} END {printf "%7d in all\n", n}'

notebooks: install  ## after changing hango: re-execute the course, commit the outputs
	$(BIN)/python notebooks/refresh.py

serve: install-lab
	$(BIN)/hango serve

bench: install
	for f in $(filter-out bench/provider_check.py,$(wildcard bench/*.py)); do echo "== $$f"; $(BIN)/python $$f || exit 1; done  # provider_check.py needs a key

mutation: install  ## mutation testing; docs/reliability.md "Mutation testing"
	HANGO_DATA_DIR=$(CURDIR)/.hango $(BIN)/mutmut run --max-children 2
	$(BIN)/python tests/mutation_report.py --markdown > docs/mutation-survivors.md
	$(BIN)/python tests/mutation_report.py

clean-data:
	-$(BIN)/hango db stop
	rm -rf .hango

traces:  ## Arize Phoenix (trace viewer, no Docker) in .traces-venv, on 127.0.0.1:6006
	$(PYTHON) deploy/phoenix/traces.py start

traces-stop:
	$(PYTHON) deploy/phoenix/traces.py stop
