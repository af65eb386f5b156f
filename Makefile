# The whole setup on a fresh machine: `make run` (local stack) and `make test` (the suite).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: install install-run lock run reset test test-large test-tenant-shares test-fast lint format docs synth deploy diff admin-key config bench bench-smoke bench-yield bench-sched bench-promise cost chaos smoke clean

## Python packages come from the lock files in requirements/ (exact versions, checked against
## their hashes): run.txt is what `make run` needs (the runtime, moto's server, the batchgw
## command), dev.txt adds the development tools (pytest, CDK, cdk-nag, Playwright, mypy...).
## `make lock` writes them from pyproject.toml and cli/pyproject.toml.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
PIP_INSTALL := $(VENV)/bin/pip install -q --disable-pip-version-check

$(PY):
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): requirements/run.txt pyproject.toml cli/pyproject.toml | $(PY)
	$(PIP_INSTALL) --require-hashes -r requirements/run.txt
	$(PIP_INSTALL) --no-deps --no-build-isolation -e . -e ./cli
	touch $@

$(DEV_STAMP): requirements/dev.txt $(RUN_STAMP)
	$(PIP_INSTALL) --require-hashes -r requirements/dev.txt
	touch $@

## The CDK CLI that deploy, diff and the tests run, pinned in infra/package-lock.json.
CDK_CLI := infra/node_modules/.bin/cdk
$(CDK_CLI): infra/package-lock.json
	npm ci --prefix infra --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

## Rewrite the lock files from pyproject.toml and cli/pyproject.toml, keeping every pin that
## still fits (UPGRADE=1 takes the newest versions that do): for Python 3.11 on any platform,
## and the Lambda layer's for its platform (Python 3.12, Linux aarch64) at the same versions.
LOCK := $(VENV)/bin/uv pip compile --quiet --generate-hashes --custom-compile-command "make lock" \
	$(if $(UPGRADE),--upgrade)
lock: $(DEV_STAMP)
	$(LOCK) --universal --python-version 3.11 pyproject.toml cli/pyproject.toml requirements/build.in \
		--extra local -o requirements/run.txt
	$(LOCK) --universal --python-version 3.11 pyproject.toml cli/pyproject.toml requirements/build.in \
		--extra local --extra dev -c requirements/run.txt -o requirements/dev.txt
	$(LOCK) --python-platform aarch64-manylinux2014 --python-version 3.12 pyproject.toml \
		-c requirements/run.txt -o requirements/lambda.txt

## The console's third-party modules (Preact, htm; axe-core for its browser tests), pinned in
## $(CONSOLE)/package-lock.json, installed from the npm registry and copied where the shared
## layer ships them (batchgw/console/web/vendor, not committed).
CONSOLE := layers/shared/console
CONSOLE_VENDOR := layers/shared/python/batchgw/console/web/vendor/versions.json
$(CONSOLE_VENDOR): $(CONSOLE)/package-lock.json $(RUN_STAMP)
	npm ci --prefix $(CONSOLE) --ignore-scripts --no-audit --no-fund --loglevel=error
	$(PY) -m batchgw.console.assets $(CONSOLE)/node_modules

## Everything: what running needs, the development tools and the CDK CLI.
install: install-run $(DEV_STAMP) $(CDK_CLI)

## What running the local stack needs, alone.
install-run: $(RUN_STAMP) $(CONSOLE_VENDOR)

## Run the whole gateway locally (API on :8080, simulator on :8081). Ctrl-C stops it; its
## state is kept in $(STATE_DIR) for the next run (BATCHGW_PERSIST=0 keeps nothing).
STATE_DIR ?= $(or $(BATCHGW_STATE_DIR),.local/state/$(or $(BATCHGW_PORT),8080))
LOG_DIR ?= $(or $(BATCHGW_LOG_DIR),.local/logs/$(or $(BATCHGW_PORT),8080))
run: install-run
	$(PY) -m local.run

## Forget the local stack's saved state (users, keys, batches, files, settings) and its logs: the next run starts empty.
reset:
	rm -rf -- "$(STATE_DIR)" "$(LOG_DIR)"

## Install and run the whole test suite: in two processes (pytest-xdist, a test file to each at
## a time), then the tests marked serial alone (latency goals; the check of every AWS call the
## local stacks made, recorded in $(TEST_CALLS)). `$(PY) -m pytest` alone runs it all in one.
TEST_CALLS := $(CURDIR)/.local/test-aws-calls
PYTEST := BATCHGW_TEST_AWS_CALLS_DIR="$(TEST_CALLS)" $(PY) -m pytest -q -p no:cacheprovider
test: install
	rm -rf -- "$(TEST_CALLS)"
	$(PYTEST) -n 2 --dist loadfile -m "not serial" --durations=30; first=$$?; \
	$(PYTEST) -m serial --durations=10; second=$$?; \
	exit $$(( first || second ))

## The slow checks outside `make test`: 100 MB files through the Uploads API and the CLI are
## validated, counted and start running (a few minutes).
test-large: install
	BATCHGW_LARGE_FILE_CHECKS=1 $(PYTEST) tests/e2e/test_large_files.py -k 100mb

## The engine's tenant order (BATCH_TENANT_SHARES, off by default) on a local stack: four
## e2e tests outside `make test` while that setting stays off (a few minutes).
test-tenant-shares: install
	BATCHGW_TENANT_SHARE_CHECKS=1 $(PYTEST) tests/e2e/test_priorities.py

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(CURDIR)/.local/site

## Serve the documentation site (docs/, mkdocs.yml) at DOCS_ADDR, rebuilt on every change.
DOCS_ADDR ?= 127.0.0.1:8000
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr $(DOCS_ADDR)

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## Synthesize the CDK app offline into cdk.out/ (no AWS account, Docker or network).
synth: install
	$(PY) -m infra.app

## Deploy the stack into the account and region of your AWS credentials, with the project's
## own Python (CDK_ARGS passes more, e.g. CDK_ARGS="-c modelsConfig=my-models.json").
## It ends with the stack's outputs (ApiBaseUrl: the SDK's base_url) and how to make the first
## administrator and their key.
CDK ?= $(CDK_CLI)
STACK ?= BatchGw
deploy: install
	$(CDK) deploy --app "$(PY) -m infra.app" $(CDK_ARGS)
	@echo
	@echo "The API is at the ApiBaseUrl output above. A new stack has no users: create the first"
	@echo "administrator and their key (printed once) with your AWS credentials:"
	@echo "  make admin-key NAME=\"Your Name\" EMAIL=you@example.com"

## What a deploy would change.
diff: install
	$(CDK) diff --app "$(PY) -m infra.app" $(CDK_ARGS)

## The first administrator of a deployed stack and their API key, printed once, written with
## your AWS credentials into the tables the stack's outputs name (refused if an administrator
## exists; ARGS="--another" makes one more). ARGS="--control-table NAME" names the table instead.
admin-key: install-run
	$(PY) -m batchgw.first_admin --stack "$(STACK)" --name "$(NAME)" --email "$(EMAIL)" $(ARGS)

## Runtime settings of the local stack: make config ARGS="show", ARGS="set BATCH_ENABLED false".
config: install-run
	$(PY) -m local.config $(ARGS)

## Smoke-test a running batchgw, local or deployed, with the official OpenAI SDK
## (docs/operate/smoke.md): make smoke BASE_URL=https://…/v1 API_KEY=sk-… [ADMIN_KEY=sk-…]
## [MODEL=sim-chat] [ARGS="--timeout 600 --keep"]. The keys reach it through the environment:
## neither make's echo of the command nor the smoke's own command line shows them.
ifneq ($(filter smoke,$(MAKECMDGOALS)),)
ifeq ($(strip $(BASE_URL)),)
$(error make smoke needs BASE_URL=<the API base, ending in /v1; the local stack's: http://127.0.0.1:8080/v1>)
endif
ifeq ($(strip $(API_KEY)),)
$(error make smoke needs API_KEY=<a key that may create batches; the local stack's: sk-local-alice>)
endif
endif
smoke: export BATCHGW_API_KEY = $(API_KEY)
smoke: export BATCHGW_ADMIN_KEY = $(ADMIN_KEY)
smoke: install
	$(PY) -m batchgw_cli smoke --base-url "$(BASE_URL)" $(if $(MODEL),--model "$(MODEL)") $(ARGS)

bench: install
	$(PY) -m bench.run

## Every benchmark's entry point at a tiny size (a few minutes): proves each still runs; `make test` runs it too.
bench-smoke: install
	$(PY) -m bench.smoke $(ARGS)

## Does batch work give way to interactive traffic, and use what it leaves idle? (about 20 minutes:
## three runs of three 2-minute cycles; ARGS="--cycles 1" for a short one). Writes bench/last.json's
## yield keys and bench/yield.png.
bench-yield: install
	$(PY) -m bench.yield_run $(ARGS)

## One scheduler across every batch, by simulation (issue 56): 1,000 tenants, 10,000 batches, 20
## models, a week of diurnal interactive load, the shares policy against FIFO and the per-batch even
## share (a few minutes; ARGS="--quick" for a tiny run, ARGS="--seed N"). Writes bench/last.json's
## sched keys and bench/sched.png.
bench-sched: install
	$(PY) -m bench.sched_sim $(ARGS)

## How close a batch's estimate at create comes to its real end (issue 56): batches of 200, 800 and
## 1,600 requests under a steady and a bursty interactive load (about 10 minutes). Writes
## bench/last.json's promise keys.
bench-promise: install
	$(PY) -m bench.promise $(ARGS)

## What one million requests of the named workload cost on AWS, from a recorded local run
## (about 3 minutes; N=500 by default, e.g. ARGS="--n 1000"; ARGS="--from-json" reprices bench/last.json).
cost: install
	$(PY) -m bench.cost $(ARGS)

## A long seeded chaos run on a local stack (crashes, throttling, faults, duplicates, cancels); prints the totals.
chaos: install
	$(PY) -m tests.e2e.chaos --batches 12 --requests 50 --kills 12 --duplicates 16 --cancels 4 \
		--window-seconds 300 --reconcile-seconds 4 --worker-timeout-seconds 20 --task-crash-rate 0.03 \
		--throttle-rate 0.05 --reporters 3 --provider-batches 4 --revocations 2 --responses 16

clean:
	rm -rf $(VENV) cdk.out infra/node_modules .pytest_cache .mypy_cache .ruff_cache $(CONSOLE)/node_modules layers/shared/python/batchgw/console/web/vendor tests/e2e/screenshots
