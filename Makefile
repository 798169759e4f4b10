# `make run`: set everything up and serve the dashboard on http://127.0.0.1:8000 (or HOST=... PORT=...)
#   with the automatic recovery worker (manage.py recovery_worker) beside it, stopped when the server exits;
#   the server is Daphne's runserver, which takes its websocket limits from the settings (TURNLOG_WS_MAX_MESSAGE_BYTES)
# `make simulate`: live demo agents against the server `make run` started (the same HOST=... PORT=...)
# `make run-scaleout`: docs/guide/deploy.md's deployment on this machine: 2 Daphne + the worker + nginx on PostgreSQL
#   (DATABASE_URL, default its own database turnlog_scaleout at 127.0.0.1:5432) and a Redis of its own, free ports
# `make test`: set everything up and run the whole test suite, in parallel workers (TEST_WORKERS=4; PYTEST_ARGS=... for more options)
#   (and first makes .venv-adk, the Google ADK tests' own virtualenv: tests/sessions_app/otel/adk-requirements.txt)
#   (and npm ci in tests/js and tests/js/ai6, the Vercel AI SDK tests' packages, when their lock files are newer)
# `make bench`: every benchmark (bench/otlp.py also runs Arize Phoenix from its own virtualenv, PHOENIX_VENV)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# bench/otlp.py compares with Arize Phoenix, pinned, in a virtualenv of its own outside the repository.
PHOENIX_VENV ?= ../phoenix-venv
PHOENIX_VERSION := 20.26.1
# The Google ADK tests run the agent from a virtualenv of its own: google-adk caps OpenTelemetry below the suite's.
ADK_VENV := .venv-adk
ADK_REQUIREMENTS := tests/sessions_app/otel/adk-requirements.txt

.PHONY: run run-scaleout test js-deps migrate simulate bench phoenix-venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed-run

migrate: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput

# Every process of a run (the server, the worker) writes its metrics under one directory, wiped at each
# start: /metrics adds them up (docs/guide/metrics.md). Exported before Python starts: prometheus-client reads it at import.
METRICS_DIR := var/prometheus
run: migrate
	$(BIN)/python manage.py seed_demo
	$(BIN)/python manage.py local_setup --host $(HOST) --port $(PORT)
	rm -rf $(METRICS_DIR) && mkdir -p $(METRICS_DIR)
	export PROMETHEUS_MULTIPROC_DIR=$(abspath $(METRICS_DIR)); \
	$(BIN)/python manage.py recovery_worker & worker=$$!; \
	trap 'kill $$worker 2>/dev/null; wait $$worker' EXIT; trap 'exit 130' INT TERM; \
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

# nginx's HTTPS port: SCALEOUT_PORT=8443 (default a free one, printed); Ctrl-C stops everything (deploy/run_scaleout.py).
SCALEOUT_PORT ?= 0
run-scaleout: $(VENV)/.installed-run
	$(BIN)/python deploy/run_scaleout.py --setup --port $(SCALEOUT_PORT)

simulate: migrate
	$(BIN)/python manage.py simulate --url http://$(HOST):$(PORT)

# The suite runs in TEST_WORKERS pytest-xdist workers (TEST_WORKERS=0: in this process alone), whole test
# files at a time (--dist loadfile: a module's servers and browser start once), each worker on databases of its
# own (conftest.py). More workers than cores pays: most of the suite waits on sockets, servers and timeouts.
TEST_WORKERS ?= 4
test: $(VENV)/.installed-test $(ADK_VENV)/.installed js-deps
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

$(ADK_VENV)/.installed: $(ADK_REQUIREMENTS) turnlog_client/pyproject.toml
	$(PYTHON) -m venv $(ADK_VENV)
	$(ADK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(ADK_VENV)/bin/python -m pip install --quiet -r $(ADK_REQUIREMENTS) -e './turnlog_client[otel]'
	touch $@

# The JavaScript agents of the OTLP tests (tests/js: the Vercel AI SDK 7 and the OpenTelemetry JS SDK;
# tests/js/ai6: the SDK's version 6), installed from their lock files when those are newer. Needs node and npm.
JS_DIRS := tests/js tests/js/ai6
js-deps: $(addsuffix /node_modules/.installed,$(JS_DIRS))

%/node_modules/.installed: %/package-lock.json %/package.json
	cd $* && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION):
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet 'arize-phoenix==$(PHOENIX_VERSION)'
	touch $@

phoenix-venv: $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION)

# Each benchmark exits non-zero when it misses its target; all of them run.
bench: $(VENV)/.installed-test phoenix-venv
	-$(BIN)/python bench/ingest.py
	-$(BIN)/python bench/recovery.py
	-$(BIN)/python bench/fork.py
	-$(BIN)/python bench/live.py
	-$(BIN)/python bench/search.py
	-$(BIN)/python bench/otlp.py --phoenix-venv $(PHOENIX_VENV)
	$(BIN)/python bench/per_request.py

clean:
	rm -rf $(VENV) $(ADK_VENV) var *.egg-info
