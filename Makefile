# surveillance_pipeline: `make run` sets everything up and runs the lab; `make test` runs the suite.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every target that talks to PostGIS or Dagster runs with the provisioned environment. Dagster writes a
# step's per-partition events in batches of up to DAGSTER_EVENT_BATCH_SIZE (surveillance_pipeline/orchestration/reporting.py).
EVENT_BATCH_SIZE := 200
WITH_ENV := set -a && . .local/env.sh && set +a && \
	export DAGSTER_HOME=$(CURDIR) DAGSTER_ARTIFACTS_DIR=$(CURDIR)/.dagster \
	DAGSTER_COMPUTE_LOGS_DIR=$(CURDIR)/.dagster/compute_logs DAGSTER_EVENT_BATCH_SIZE=$(EVENT_BATCH_SIZE) &&
# The commands a user runs against the warehouse also use the data-shaping settings an earlier command was
# given (SURVEILLANCE_DATA_DIR, GBIF_SOURCE, the species and quality files), kept in .local/settings.env.
WITH_KEPT := $(WITH_ENV) . scripts/kept_settings.sh &&

.PHONY: help venv provision run plan verify repair test test-fast faults bench ui workers lint lock clean replay add-species

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --require-virtualenv -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

venv: $(STAMP) ## Create .venv from the lock file

provision: venv ## Start (or install) PostgreSQL + PostGIS (and Redis, when SURVEILLANCE_PROFILE=distributed) and write .local/env.sh
	@PYTHON=$(BIN)/python bash scripts/provision_postgis.sh
	@if [ "$${SURVEILLANCE_PROFILE:-local}" = distributed ]; then bash scripts/provision_redis.sh; fi
	@# Bytecode kept beside the sources, as an install would, for every process that imports the package
	@# (make run, its children, the workers, the bench's runs): with PYTHONDONTWRITEBYTECODE set, each one
	@# compiled the whole package again (0.3-0.4 s of CPU). Up to date, this is a stat of each file.
	@$(BIN)/python -m compileall -q surveillance_pipeline > /dev/null || true

run: provision ## Materialize every asset on the lab data and print what was loaded or skipped
	@mkdir -p .dagster
	@$(WITH_ENV) broker=$${REDIS_URL:+REDIS_URL}; if [ "$${SURVEILLANCE_PROFILE:-local}" = distributed ]; then \
		echo "make run: profile distributed: steps go to the Celery workers through $${broker:-redis://127.0.0.1:6379/0} (make workers N=2; wait for their ready.)"; \
	else echo "make run: profile local: every step in this process (SURVEILLANCE_PROFILE=distributed sends them to workers)"; fi
	@$(WITH_KEPT) $(BIN)/python -m surveillance_pipeline.commands.make_run

plan: provision ## What the next make run would load, and why (reads only; like terraform plan)
	@$(WITH_KEPT) $(BIN)/python -m surveillance_pipeline.commands.plan

verify: provision ## Check every table target's partitions against the fingerprints their loads recorded; notes what it finds for the next make run to repair
	@$(WITH_KEPT) $(BIN)/python -m surveillance_pipeline.commands.verify

repair: provision ## make run, comparing every skipped partition's rows with its fingerprint (after make verify)
	@mkdir -p .dagster
	@$(WITH_KEPT) SURVEILLANCE_VERIFY_TARGETS=1 $(BIN)/python -m surveillance_pipeline.commands.make_run

test: provision ## Run the whole test suite against the provisioned PostGIS (and a real dagster dev)
	@bash scripts/provision_chromium.sh
	@bash scripts/provision_redis.sh --install-only
	@mkdir -p .dagster
	@$(WITH_ENV) $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=15

test-fast: provision ## The suite without the browser session and the Celery workers: the edit-test loop
	@mkdir -p .dagster
	@$(WITH_ENV) $(BIN)/python -m pytest -n 2 --dist loadfile -m "not e2e and not distributed"

replay: provision ## Regenerate a masked release from provenance row ID (make replay ID=N) and check its sha256
	@$(WITH_KEPT) $(BIN)/python -m surveillance_pipeline.releases.replay --provenance-id $(ID)

faults: provision ## Kill, restart, overlap and disconnect loads, stop Redis and PostgreSQL; print the reliability table (~10–12 min)
	@# The broker rows start a Redis of their own: installed here as make test installs it.
	@bash scripts/provision_redis.sh --install-only
	@mkdir -p .dagster
	@$(WITH_ENV) $(BIN)/python -m faults $(FAULTS_ARGS)

ui: provision ## The Dagster UI and daemon on http://127.0.0.1:3000
	@mkdir -p .dagster
	@$(WITH_KEPT) $(BIN)/python -m surveillance_pipeline.commands.pools && \
		$(BIN)/dagster dev -h 127.0.0.1 -p $${PORT:-3000} -w workspace.yaml

workers: provision ## Keep N Celery workers running for the distributed profile (make workers N=2); Ctrl-C stops them
	@bash scripts/provision_redis.sh
	@mkdir -p .dagster
	@$(WITH_KEPT) $(BIN)/python -m surveillance_pipeline.orchestration.workers $(or $(N),2)

bench: provision ## Time the paths and every asset at 1M and 5M against their limits (BENCH_ARGS=--only-at-size, --no-at-size, --with-20m, --only-distributed, --downloads, --only-whole-run, --only-refresh, ...; python -m bench --help)
	@mkdir -p .dagster
	@# The distributed parts start private Redis servers of their own: only the package is needed.
	@case "$(BENCH_ARGS)" in *distributed*) bash scripts/provision_redis.sh --install-only;; esac
	@$(WITH_ENV) $(BIN)/python -m bench $(BENCH_ARGS)

add-species: venv ## Add a species by name to the registry file SURVEILLANCE_SPECIES_FILE (make add-species NAME="Genus species" ARGS="--init")
	$(BIN)/python -m surveillance_pipeline.gbif.add_species "$(NAME)" $(ARGS)

lint: venv ## ruff (format check, lint incl. bandit's S rules) and mypy
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy surveillance_pipeline bench

lock: ## Re-resolve requirements.lock from pyproject.toml (needs uv: pip install uv)
	uv pip compile pyproject.toml --extra dev --python-version 3.11 -o requirements.lock

clean: ## Remove the virtual environment and local Dagster artifacts (keeps data/ and the database)
	rm -rf $(VENV) .dagster
