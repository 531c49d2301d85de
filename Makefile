# Set-up and entry points. `make run` and `make test` create .venv on first use (idempotent).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint report clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# One snakemake start, not two: each start costs ~10 s where SLURM's client commands have no controller.
run: $(STAMP)
	$(BIN)/snakemake --cores all --workflow-profile profiles/local --report results/report.html --report-after-run

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile rules
	$(BIN)/snakemake --lint

test: lint
	$(BIN)/python -m pytest

clean:
	rm -rf results/* logs benchmarks .snakemake
	touch results/.gitkeep
