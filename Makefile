# dshloop: `make run` serves the API, panel and scheduler; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@ $(RUN_STAMP)

# The embedded mode's files live under var/ (DSHLOOP_VAR_DIR): the SQLite database and a secret key
# made once here, so that sign-ins survive restarts. Settings only read the key (DJANGO_SECRET_KEY,
# when set, wins); importing them writes nothing.
VAR_DIR := $(or $(DSHLOOP_VAR_DIR),var)

$(VAR_DIR)/secret_key: | $(VENV)/bin/python
	mkdir -p -m 700 $(VAR_DIR)
	umask 077 && $(PY) -c 'import secrets; print(secrets.token_urlsafe(50))' > $@.tmp && mv $@.tmp $@

run: $(RUN_STAMP) $(VAR_DIR)/secret_key
	$(PY) manage.py migrate --noinput
	$(PY) manage.py bootstrap
	exec $(PY) manage.py serve

# The suite runs twice: on SQLite, then on PostgreSQL (DSHLOOP_TEST_DATABASE_URL; skipped
# with the reason when unset, a failure when unreachable under CI=true).
# Under CI the PostgreSQL pass defaults to this machine's server: CI never skips it.
ifeq ($(CI),true)
DSHLOOP_TEST_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/test
export DSHLOOP_TEST_DATABASE_URL
endif

# Each pass runs the fast suite first (no real processes, no browser: minutes), then the process
# and browser tests (real runloops, serve and Chromium, real time) in their own pytest run.
FAST := -m "not process and not browser"
SLOW := -m "process or browser"

test: $(TEST_STAMP)
	scripts/build-dsh-plugin.sh "$(DSH_DIR)" test
	$(PY) -m pytest $(FAST) $(PYTEST_ARGS)
	$(PY) -m pytest $(SLOW) $(PYTEST_ARGS)
	$(PY) -m pytest --ds=tests.settings_postgres $(FAST) $(PYTEST_ARGS)
	$(PY) -m pytest --ds=tests.settings_postgres $(SLOW) $(PYTEST_ARGS)

# A real DeepSeek Harness host for DSHLOOP_HOST=dsh and the tests marked `dsh`: Node 22,
# pnpm and @deepseek-ai/dsh from the npm registry, into a cache outside the clone (~30 s, 534 MB).
# Idempotent: a second run finds the install's stamp and does nothing. Another directory:
# `make dsh DSHLOOP_DSH_DIR=...`, and export DSHLOOP_DSH_DIR for the tests too.
DSH_DIR := $(or $(DSHLOOP_DSH_DIR),/var/cache/dshloop/dsh-0.1.0-rc.8)

.PHONY: dsh
dsh:
	scripts/install-dsh.sh "$(DSH_DIR)"

# The whole system on one machine, as a person's own DSH runs it: DSH (installed if missing) with
# dshloop's plugin, which starts the profile's own dshloop (this clone's; DSHLOOP_HOST=dsh, the token
# made in DSH and handed over on a pipe); both URLs printed; Ctrl-C stops DSH, and DSH its dshloop.
# DSH's data lives in $(VAR_DIR)/dsh-home, dshloop's in its profile. Set DEEPSEEK_API_KEY for real turns.
.PHONY: run-dsh
run-dsh: $(RUN_STAMP)
	DSHLOOP_VAR_DIR=$(VAR_DIR) exec scripts/run-dsh.sh "$(DSH_DIR)"

# Style (ruff check, ruff format --check), the import layers (import-linter, pyproject.toml), the
# type check (mypy with django-stubs, [tool.mypy]) and the DSH plugin's type-check and the check
# that its committed bundle (dsh-plugin/lib/, what `dsh plugin add` loads) is what its sources build
# (dsh-plugin/, with DSH's Node 22: skipped without it outside CI).
lint: $(TEST_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) -m mypy
	scripts/build-dsh-plugin.sh "$(DSH_DIR)" lint

# Benchmarks against django-q2's Schedule and pgbench, written to docs/BENCHMARKS.md:
# ~50 min on a quiet machine, then B5, delivery into a real DSH, where one is installed (`make dsh`;
# DSHLOOP_DSH_DIR), ~10 min. `make bench QUICK=1` runs tiny sizes in ~8 min to check the harness.
# `make bench DSH=1` runs B5 alone (QUICK=1: ~1 min).
bench: $(RUN_STAMP)
	$(PY) -m bench.run $(if $(QUICK),--quick) $(if $(DSH),--dsh) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis

# docs/monitoring-dashboard.png: docs/grafana-dashboard.json drawn from a real run of the
# web server and a scheduler, with a crash and failures on a timeline (~5 min; needs matplotlib).
DOCS_STAMP := $(VENV)/.installed-docs

$(DOCS_STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $@ $(RUN_STAMP)

.PHONY: dashboard
dashboard: $(DOCS_STAMP)
	$(PY) -m bench.dashboard $(DASHBOARD_ARGS)
