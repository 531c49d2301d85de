# Set-up and entry points. `make run` and `make test` create .venv on first use (idempotent).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint report clean zoo

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU torch first: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# `make run CONFIG=config/presets/realshape.yaml` runs a preset. Its file is checked first: snakemake's own
# loader hides where a syntax error is and keeps the last of two duplicate keys.
CONFIG ?=
SNAKEMAKE_ARGS := --workflow-profile profiles/local $(if $(CONFIG),--configfile $(CONFIG))

# One snakemake start, not two: each start costs ~10 s where SLURM's client commands have no controller.
# A lock left by a killed run makes snakemake refuse to start; say the exact command that removes it, but
# only when no run is live here (the workflow has then named the live one).
run: $(STAMP)
	$(if $(CONFIG),$(BIN)/python -m hybridlens.config $(CONFIG))
	@echo "$(BIN)/snakemake --cores all $(SNAKEMAKE_ARGS) --report results/report.html --report-after-run"
	@$(BIN)/snakemake --cores all $(SNAKEMAKE_ARGS) --report results/report.html --report-after-run || { \
	  status=$$?; \
	  if ls .snakemake/locks/*.lock >/dev/null 2>&1 && ! $(BIN)/python -m hybridlens.runlock >/dev/null; then \
	    echo "hybridlens: a killed run left its lock. If no other snakemake runs in this directory, remove it with:"; \
	    echo "  $(BIN)/snakemake --unlock --cores 1 $(SNAKEMAKE_ARGS)"; \
	    echo "then run make run$(if $(CONFIG), CONFIG=$(CONFIG)) again (unfinished outputs are redone)."; \
	  fi; \
	  exit $$status; }

# Retrain every toy of zoo/zoo.yaml and the from-scratch HLA models, gate them and copy them to
# zoo/ with their manifests.
zoo: $(STAMP)
	$(BIN)/python -m hybridlens.config zoo/zoo.yaml
	@start=$$(date +%s); \
	$(BIN)/snakemake --cores all --workflow-profile profiles/local --configfile zoo/zoo.yaml \
	  --keep-going --forcerun train_toy hla_train -- ship_zoo && \
	echo "make zoo: trained and shipped in $$(( $$(date +%s) - start )) s"

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
