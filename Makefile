# Two commands on a fresh machine: `make demo` and `make test`. Both install into .venv first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DAGSTER_HOME ?= $(CURDIR)/storage/dagster
export SOCO_STORAGE ?= $(CURDIR)/storage
export HF_HUB_OFFLINE := 1
export DAGSTER_DISABLE_TELEMETRY := 1
export PYTHONHASHSEED := 0

.PHONY: install demo test test-fast lint ui bench clean FORCE

# The tests' temporary folders (TMPDIR) on /dev/shm where it is a tmpfs with 4 GiB free: every Dagster test
# instance is SQLite and every table write fsyncs, and on a virtual disk that cost a quarter of the pipeline
# tests' time (docs/benchmarks.md). Elsewhere (a 64 MB /dev/shm in a container) the system's temp folder.
TEST_TMPDIR ?= $(shell avail=$$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1); \
	[ "$$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ "$${avail:-0}" -ge 4 ] && echo /dev/shm/soco-tests)
# Bytecode is written even where the environment says not to: pytest then keeps the test modules it has
# rewritten, and the suite's many Python children find the pipeline compiled (collection 21 s -> 15 s).
# One OpenMP/MKL thread per process: the suite runs a worker per core or more (and their Dagster children),
# so torch's default of a thread per core only contends (measured, make test on 2 cores: 649 s -> 609 s of
# pytest, user CPU 757 s -> 581 s). A test that needs more threads sets them itself (test_cpu_determinism).
TEST_ENV := $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR)) PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# pytest-xdist workers (one per core): whole modules per worker, so a module's fixtures are built once.
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --dist loadfile
# pytest's exit code 5 (no test selected, e.g. PYTEST_ARGS names only stack tests) is not a failure here.
PYTEST_OK := || [ $$? -eq 5 ]

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# Every Eval Ever's schemas and validator (`soco export-results --format eee`, docs/results.md): the wheel
# needs Python 3.12, so it is not installed; it is downloaded once and unpacked under the venv, uncommitted.
EEE_VERSION := 0.3.0
EEE_DIR := $(VENV)/share/every-eval-ever/$(EEE_VERSION)
$(EEE_DIR)/every_eval_ever/schemas/eval.schema.json: | $(STAMP)
	$(VENV)/bin/pip download -q --disable-pip-version-check every-eval-ever==$(EEE_VERSION) --no-deps \
		--python-version 3.12 --only-binary=:all: -d $(EEE_DIR)/wheel
	$(PY) -m zipfile -e $(EEE_DIR)/wheel/every_eval_ever-$(EEE_VERSION)-py3-none-any.whl $(EEE_DIR)
	touch $@

install: $(STAMP) $(EEE_DIR)/every_eval_ever/schemas/eval.schema.json

# A DAGSTER_HOME of your own keeps its dagster.yaml; only one this Makefile wrote is refreshed, on every run
# where it differs from what it would write now: a copy of a checkout (or of storage/) keeps the original's
# absolute storage root in it, and its runs would land in the original's instance (issue 58).
$(DAGSTER_HOME)/dagster.yaml: dagster.yaml FORCE
	@mkdir -p $(DAGSTER_HOME)
	@if [ -f $@ ] && ! grep -q 'The Makefile copies this file' $@; then \
		echo "keeping $@ (not written by this Makefile); see dagster.yaml for the settings the demo expects"; \
	else sed 's#@STORAGE@#$(SOCO_STORAGE)#g' dagster.yaml > $@.tmp; \
		if cmp -s $@.tmp $@; then rm -f $@.tmp; else \
			if [ -f $@ ]; then echo "rewriting $@ for the storage root $(SOCO_STORAGE) (it named another one: a copied checkout?)"; fi; \
			mv $@.tmp $@; fi; fi

FORCE:

demo: install $(DAGSTER_HOME)/dagster.yaml
	$(PY) -m soco_pipeline.cli.demo

# The whole suite (every tier), after the linter, the formatter's check and `dg check defs`, in one pytest
# session on SUITE_WORKERS xdist workers, one per core. The stack tier is one group that one worker runs
# test after test; every other module is a group of its own (tests/tier_scheduling.py). One worker more
# than the cores used to pay while the stack tier waited on its servers; with the heavy fixtures shared and
# smaller it only contends (2 cores, fresh clone: 2 workers 500 s of pytest with one phase over 60 s,
# 3 workers 603 s with four, docs/benchmarks.md). SUITE_WORKERS=0: one process.
SUITE_WORKERS ?= $(shell nproc)
test: install $(DAGSTER_HOME)/dagster.yaml
	$(VENV)/bin/ruff check soco_pipeline tests benchmarks
	$(VENV)/bin/ruff format --check soco_pipeline tests benchmarks
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/dg check defs
	$(if $(TEST_TMPDIR),mkdir -p -m 1777 $(TEST_TMPDIR))
	$(TEST_ENV) $(PY) -m pytest -q -n $(SUITE_WORKERS) --tier-groups --durations=15 \
		$(PYTEST_ARGS) $(PYTEST_OK)

# The unit tier only (no Dagster run, no server, no subprocess): the fast feedback while editing, on the
# xdist workers (258 s -> 179 s on an idle 2-core machine, docs/benchmarks.md). TEST_WORKERS=0: one process.
test-fast: install
	$(if $(TEST_TMPDIR),mkdir -p -m 1777 $(TEST_TMPDIR))
	$(TEST_ENV) $(PY) -m pytest -q -m unit $(XDIST) --durations=15 $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check soco_pipeline tests benchmarks

ui: install $(DAGSTER_HOME)/dagster.yaml
	@echo "Dagster UI on http://127.0.0.1:3000 (stop with Ctrl-C)"
	$(VENV)/bin/dagster dev -h 127.0.0.1 -p 3000 -w workspace.yaml

# The model-zoo (10/30/100 models) and model-cost benchmarks run for an hour or more at their defaults: `make
# bench` runs their smoke settings; run them by hand for the figures (docs/benchmarks.md).
BENCH_ARGS_bench_zoo := --quick
BENCH_ARGS_bench_model_cost := --size tiny
bench: install
	for f in benchmarks/bench_*.py; do n=$$(basename $$f .py); echo "== $$f"; \
		case $$n in bench_zoo) a="$(BENCH_ARGS_bench_zoo)";; bench_model_cost) a="$(BENCH_ARGS_bench_model_cost)";; *) a="";; esac; \
		$(PY) $$f $$a || exit 1; done

clean:
	rm -rf storage

# --- Scale-out (docs/scaling-out.md): the local distributed stack; `make test` does not need these. ---
CLUSTER_DIR ?= $(CURDIR)/storage/cluster
.PHONY: cluster-up cluster-down cluster-status
cluster-up: install
	$(VENV)/bin/soco cluster start --dir $(CLUSTER_DIR)
cluster-down:
	$(VENV)/bin/soco cluster stop --dir $(CLUSTER_DIR)
cluster-status:
	$(VENV)/bin/soco cluster status --dir $(CLUSTER_DIR)
