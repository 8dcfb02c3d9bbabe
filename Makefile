# GPU Portal — every entry point a developer or CI needs. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements/dev.txt pyproject.toml 2>/dev/null | sha1sum | cut -c1-12)
PYTEST_ARGS ?=
# What the local cluster's real nodes run on (localcluster/realnode.py): installed by `make test`, `run`,
# `bench` and `cluster-up`, so a fresh machine gets them from the project's own setup.
NODE_DEPS := containerd runc containernetworking-plugins iptables iproute2 util-linux
# checkov lives in its own environment: its pins (packaging<24, a large tree of cloud SDKs) conflict with
# requirements/dev.txt. Re-made only when requirements/checkov.txt changes.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-$(shell sha1sum requirements/checkov.txt 2>/dev/null | cut -c1-12)
AUDIT_STAMP := audit/node_modules/.installed-$(shell sha1sum audit/package-lock.json 2>/dev/null | cut -c1-12)

.PHONY: help venv vendor run test test-fast lint format bench audit cluster-build cluster-up cluster-down deviceplugin-stubs images lock clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(STAMP): requirements/dev.txt pyproject.toml
	@$(PYTHON) -c "import ensurepip, venv" 2>/dev/null || bash devtools/system-deps.sh python3-venv
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[setup] installing Python packages into $(VENV) (pinned in requirements/dev.txt)"
	@$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install -q --disable-pip-version-check -r requirements/dev.txt
	@$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP) vendor ## create the virtualenv with the pinned dependencies (and the pages' JS libraries)

# The pages' JavaScript libraries, from the npm registry (pinned in package-lock.json), copied into
# static/vendor/ (git-ignored). Re-runs only when the lock file changes.
VENDOR_STAMP := static/vendor/.installed-$(shell sha1sum package-lock.json 2>/dev/null | cut -c1-12)
$(VENDOR_STAMP): package.json package-lock.json Makefile
	@command -v npm >/dev/null || bash devtools/system-deps.sh npm
	@echo "[setup] installing the pages' JavaScript libraries (pinned in package-lock.json)"
	@npm ci --no-audit --no-fund --loglevel=error
	@bash devtools/vendor.sh node_modules static/vendor
	@touch $@

vendor: $(VENDOR_STAMP) ## copy the pages' JavaScript libraries into static/vendor/

run: venv ## set up everything and serve the portal on http://127.0.0.1:8000 (Ctrl-C stops it all)
	@bash devtools/system-deps.sh redis-server $(NODE_DEPS)
	@$(PY) -m devtools.run

test: venv ## the whole suite against real PostgreSQL, Redis, Celery and the local GPU cluster
	@bash devtools/system-deps.sh redis-server postgresql chromium $(NODE_DEPS)
	@test -f node_modules/.package-lock.json -a node_modules/.package-lock.json -nt package-lock.json || npm ci --no-audit --no-fund --loglevel=error
	@bash localcluster/build.sh >/dev/null
	@$(PY) -m devtools.testenv -- $(PY) -m pytest $(PYTEST_ARGS)

test-fast: venv ## unit tests only (no cluster, no browser)
	@$(PY) -m devtools.testenv -- $(PY) -m pytest -m "not cluster and not celery and not browser and not images" $(PYTEST_ARGS)

lint: venv $(CHECKOV_STAMP) ## ruff, formatting, import contracts, no missing migrations, checkov over the manifests, bandit
	@$(PY) -m ruff check .
	@$(PY) -m ruff format --check .
	@$(VENV)/bin/lint-imports --no-cache
	@DEBUG=1 $(PY) manage.py makemigrations --check --dry-run
	@$(PY) -m devtools.security_scan

$(CHECKOV_STAMP): requirements/checkov.txt
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	@echo "[setup] installing checkov into $(CHECKOV_VENV) (pinned in requirements/checkov.txt)"
	@$(CHECKOV_VENV)/bin/python -m pip install -q --disable-pip-version-check -r requirements/checkov.txt
	@rm -f $(CHECKOV_VENV)/.installed-* && touch $@

format: venv ## apply ruff's fixes and formatting
	@$(PY) -m ruff check --fix .
	@$(PY) -m ruff format .

bench: venv $(AUDIT_STAMP) ## benchmarks, printed as `name: value` lines (BENCH="engine ui" runs some; see benchmarks/README.md)
	@bash devtools/system-deps.sh redis-server postgresql chromium $(NODE_DEPS)
	@bash localcluster/build.sh >/dev/null
	@GPUPORTAL_PG_DURABLE=1 GPUPORTAL_PG_OPTIONS="$${GPUPORTAL_PG_OPTIONS:--c shared_preload_libraries=pg_stat_statements}" \
		$(PY) -m devtools.testenv -- $(PY) -m benchmarks $(BENCH)

audit: venv $(AUDIT_STAMP) ## Lighthouse over every portal page (scores per page; lighthouse_*_min); `make bench` runs it too
	@bash devtools/system-deps.sh redis-server postgresql chromium
	@$(PY) -m devtools.testenv -- $(PY) -m benchmarks audit

# Lighthouse (pinned in audit/package-lock.json) has a directory of its own: `make test`'s npm install at
# the root stays small, and only `make audit` / `make bench` install it.
$(AUDIT_STAMP): audit/package.json audit/package-lock.json
	@command -v npm >/dev/null || bash devtools/system-deps.sh npm
	@echo "[setup] installing Lighthouse into audit/node_modules (pinned in audit/package-lock.json)"
	@cd audit && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

images: venv ## build the real nodes' images the cache lacks (NAMES="portal" picks; REBUILD=1 builds again)
	@$(PY) -m localcluster.images $(if $(REBUILD),--rebuild) $(NAMES)

cluster-build: ## build (once) and cache the Kubernetes binaries (control plane and kubelet)
	@bash localcluster/build.sh

deviceplugin-stubs: venv ## regenerate the committed gRPC stubs of the device plugin from its api.proto
	@$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. localcluster/deviceplugin/api.proto

cluster-up: venv ## start the local GPU cluster in the background (GPUPORTAL_REAL_NODES=1: with two real nodes); prints KUBECONFIG=<path> last
	@bash devtools/system-deps.sh $(NODE_DEPS)
	@bash localcluster/build.sh >/dev/null
	@$(PY) -m localcluster up

cluster-down: venv ## stop the local GPU cluster and everything it started
	@$(PY) -m localcluster down

lock: venv ## re-pin requirements/*.txt from requirements/*.in
	@cd requirements && ../$(VENV)/bin/pip-compile -q --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links -o base.txt base.in
	@cd requirements && ../$(VENV)/bin/pip-compile -q --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links -o dev.txt dev.in
	@cd requirements && ../$(VENV)/bin/pip-compile -q --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links -o checkov.txt checkov.in

clean: ## remove the virtualenv and local state (not the cached Kubernetes binaries)
	rm -rf $(VENV) $(CHECKOV_VENV) var test-output
