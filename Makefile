# nvlfleet — every entry point a person or CI uses. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV    ?= .venv
PY      := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)/cluster
# Where cluster binaries are cached (by version) and where the running local cluster keeps its state.
export NVLFLEET_CACHE ?= $(HOME)/.cache/nvlfleet
export NVLFLEET_CLUSTER_DIR ?= $(CURDIR)/.cluster

RACKS ?= 4
GPU   ?= GB200
# More `python -m localcluster fleet` options, e.g. FLEET_ARGS="--name lab --cordoned 1 --occupied 3".
FLEET_ARGS ?=

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  %-18s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	@echo "==> creating $(VENV) and installing nvlfleet with its dev dependencies"
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

.PHONY: setup
setup: $(VENV)/.installed ## create the virtualenv with nvlfleet and its dev tools

.PHONY: lint
lint: setup ## ruff, import-layer contracts, mypy (strict on the pure core)
	$(VENV)/bin/ruff check operator tests bench cluster
	$(VENV)/bin/ruff format --check operator tests bench cluster
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

.PHONY: fmt
fmt: setup ## format the code
	$(VENV)/bin/ruff format operator tests bench cluster
	$(VENV)/bin/ruff check --fix operator tests bench cluster

.PHONY: unit
unit: setup prometheus ## unit tests of the pure core and CLI (no cluster)
	$(PY) -m pytest -q tests/unit

.PHONY: on-demand
on-demand: setup ## build (or find cached) Kueue and KEDA, the components only some tests and the bench start
	@$(PY) -m localcluster build

.PHONY: integration
integration: setup prometheus cluster-up on-demand ## integration tests against the local real cluster, then the KEDA loop on it
	@# on-demand first: a cold KEDA build inside a test's fixture would count against that test's time limit.
	$(PY) -m pytest -q -m integration tests/integration
	@# After the rest: the KEDA tests register external.metrics.k8s.io on this cluster (their fixture removes it again).
	$(PY) -m pytest -q -m keda tests/integration/test_autoscaling_keda.py

.PHONY: test
test: lint unit integration ## everything CI runs: lint, types, unit and integration tests

.PHONY: crd
crd: setup ## regenerate crds/ (and the chart's copy) from the models
	$(VENV)/bin/nvlfleet crd > crds/nvlfleet.io_deepseekservings.yaml
	cp crds/nvlfleet.io_deepseekservings.yaml charts/nvlfleet/crds/nvlfleet.io_deepseekservings.yaml

.PHONY: generated
generated: crd ## regenerate every generated file: the CRD (crds/ + chart), Grafana dashboards, Prometheus alerts
	$(VENV)/bin/nvlfleet dashboards --out charts/nvlfleet

.PHONY: prometheus
prometheus: setup ## Prometheus + promtool from Debian's package, unpacked into the cache (no service installed)
	@$(PY) -m localprometheus install

.PHONY: lock
lock: ## re-pin requirements/runtime.lock (the operator image's dependencies) from pyproject.toml
	@rm -rf .lock-venv && python3 -m venv .lock-venv && .lock-venv/bin/pip install --quiet --upgrade pip
	@.lock-venv/bin/pip install --quiet .
	@{ sed -n '1,/^[^#]/{/^#/p}' requirements/runtime.lock; .lock-venv/bin/pip freeze --exclude nvlfleet; } > requirements/runtime.lock.new
	@mv requirements/runtime.lock.new requirements/runtime.lock && rm -rf .lock-venv
	@git diff --stat requirements/runtime.lock || true

.PHONY: golden
golden: setup ## regenerate tests/unit/golden (rendered manifests of the examples); review the diff
	PYTHONPATH=$(CURDIR)/tests:$(PYTHONPATH) $(PY) -m support.golden_cases

.PHONY: cluster-up
cluster-up: setup ## build (or reuse) the binaries and start the local cluster; prints KUBECONFIG=...
	@$(PY) -m localcluster up

.PHONY: cluster-down
cluster-down: ## stop the local cluster (by recorded PIDs) and remove its state
	@test -x $(PY) && $(PY) -m localcluster down || python3 -m localcluster down

.PHONY: cluster-status
cluster-status: ## show the local cluster's components; prints KUBECONFIG=...
	@$(PY) -m localcluster status

.PHONY: fleet
fleet: setup ## add a simulated NVL72 fleet: make fleet RACKS=4 GPU=GB200 [FLEET_ARGS="--occupied 3"]
	@$(PY) -m localcluster fleet --racks $(RACKS) --gpu $(GPU) $(FLEET_ARGS)

.PHONY: demo
demo: setup prometheus ## the main job on a laptop: 4 GB200 + 2 GB300 NVL72 racks served by nvlfleet, live tokens/s and $/GPU-h
	@$(PY) -m localdemo up

.PHONY: demo-down
demo-down: ## stop the demo's operator, simulated vLLM and Prometheus (recorded PIDs) and remove its objects
	@$(PY) -m localdemo down

.PHONY: demo-load
demo-load: ## queue requests at a demo serving's decode engines, watch KEDA scale it: make demo-load WAITING=32 [SERVING=...]
	@test -n "$(WAITING)" || { echo "usage: make demo-load WAITING=<requests> [SERVING=<name>]  (needs make keda-up)"; exit 2; }
	@$(PY) -m localdemo load $(SERVING) --waiting $(WAITING)

.PHONY: keda-up
keda-up: setup ## KEDA on the local cluster (built once from the Go module proxy, ~20 min; then cached)
	@$(PY) -m localcluster keda up

.PHONY: keda-down
keda-down: ## stop KEDA by its recorded PIDs and remove its external metrics APIService
	@$(PY) -m localcluster keda down

.PHONY: compare-placement
compare-placement: setup cluster-up ## nvlfleet vs LWS exclusive topology vs pod affinity vs Kueue TAS, same workload, real cluster
	$(PY) bench/compare_placement.py $(COMPARE_ARGS)

.PHONY: bench
bench: setup ## benchmarks side by side (own local cluster in .bench/); writes docs/benchmarks.md [BENCH_ARGS="--quick"]
	$(PY) bench/run.py $(BENCH_ARGS)
