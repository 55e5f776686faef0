# Model Probe: `make run` starts the dashboard, `make test` runs the test suite.
# Both create .venv and install on first use. torch is installed first, from its
# exact pin in requirements.txt, so that nothing pulls a CUDA build.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_PIN := $(shell grep -E '^torch==' requirements.txt)

.PHONY: install run test bench clean-venv

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet -r requirements-dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python app.py

test: $(STAMP)
	$(BIN)/python -m pytest

clean-venv:
	rm -rf $(VENV)
