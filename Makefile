# Everything installs itself: a fresh machine needs only Python 3.11+, Java 17+ and Maven.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
PYTEST_PROCESSES ?= 3
BENCH_ARGS ?=
COMPAT_ARGS ?=
CHAOS_SEED ?=
CHAOS_FAULTS ?= 1000
CHAOS_MINUTES ?= 150
DRIVER_CRASH_RUNS ?= 20
DRIVER_CRASH_SEED ?=
EXECUTOR_CHURN ?= 20
RELEASE_ARGS ?=

.PHONY: demo test setup broker-jars dist release bench protocol-load chaos driver-crashes executor-churn compat release-tests spin model

## demo: install everything and run the example exactly-once pipeline on an embedded Kafka
demo: setup
	$(PY) -m examples.exactly_once_pipeline

## test: install everything (venv, package, broker jars) and run the whole test suite
## (PYTEST_PROCESSES test processes side by side, each with its own broker and Spark; 0: one), while
## what the later tests need from outside is fetched beside the first ones (tests/prefetch.py)
test: setup spin
	mkdir -p .cache; $(PY) -m tests.prefetch > .cache/prefetch.log 2>&1 & \
	$(PY) -m pytest -n $(PYTEST_PROCESSES) --dist loadgroup $(PYTEST_ARGS); status=$$?; \
	wait; cat .cache/prefetch.log; exit $$status

setup: $(STAMP) broker-jars

# --no-compile: pip would byte-compile every module of every package (pyspark alone has thousands);
# Python compiles a module the first time it is imported instead, which is far fewer
$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile --upgrade pip
	# compat mode puts the checkout on sys.path, so Spark's pkgutil-based discovery of pyspark_* sees it
	$(PY) -m pip install --quiet --no-compile -e '.[test]' --config-settings editable_mode=compat
	touch $(STAMP)

## broker-jars: download the pinned Apache Kafka broker's jars with Maven (once; the tests fetch the oldest supported)
broker-jars: $(STAMP)
	$(PY) -m pyspark_eos.testing.embedded_kafka fetch-jars

## dist: build the wheel (pip), the sdist, the zip (--py-files) and the Maven artifact (--packages) into dist/
# One build at a time (test processes run side by side), and only when what goes into the
# artifacts changed (the wheel's description is README.md).
# The package's directories are prerequisites too: removing a module changes its directory.
# What ships is pyspark_eos/ alone (the runtime and its test kit, pyspark_eos/testing/), with the
# conf/ files the kit reads copied into pyspark_eos/testing/conf/.
dist:
	@mkdir -p dist && $(if $(shell command -v flock),flock dist/.lock) sh -c \
		'ls dist/pyspark_eos_kafka-*.whl >/dev/null 2>&1 || rm -f dist/.built; $(MAKE) --no-print-directory dist/.built'

dist/.built: $(STAMP) setup.cfg pyproject.toml README.md devtools/distribution.py $(wildcard conf/*) $(shell find pyspark_eos -name '*.py' -o -type d -not -name __pycache__)
	$(PY) -m devtools.distribution --out dist
	touch $@

## release: build every artifact afresh into dist/, check them (versions, twine, contents, the wheel installed
## in a fresh virtual environment running a pipeline), then make release-tests; RELEASE_ARGS="--help" for options
release: setup $(VENV)/.release-installed
	$(PY) -m devtools.release $(RELEASE_ARGS)

## bench: every benchmark scenario (benchmarks/README.md); BENCH_ARGS="--scale quick" for a short run, "--scenario copy,..." for some
bench: setup $(VENV)/.bench-installed
	$(PY) -m benchmarks.bench $(BENCH_ARGS)

## protocol-load: the exactly-once protocol's cost per task as pipelines and tasks grow, no Spark, on a three-node
## cluster (benchmarks/protocol_load.py); PROTOCOL_LOAD_ARGS="--pipelines 1,10 --tasks 100" for some cases
protocol-load: setup
	$(PY) -m benchmarks.protocol_load $(PROTOCOL_LOAD_ARGS)

## chaos: the chaos campaign (docs/chaos.md): CHAOS_SEED (default: random, printed), CHAOS_FAULTS, CHAOS_MINUTES
chaos: setup $(VENV)/.bench-installed
	$(PY) -m devtools.chaos $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) --faults $(CHAOS_FAULTS) --minutes $(CHAOS_MINUTES)

## driver-crashes: an update-mode aggregation through foreachBatch, its driver killed twice at random moments,
## checked at once after its last run (devtools/driver_crashes): DRIVER_CRASH_RUNS (default 20), DRIVER_CRASH_SEED
driver-crashes: setup
	$(PY) -m devtools.driver_crashes --runs $(DRIVER_CRASH_RUNS) $(if $(DRIVER_CRASH_SEED),--seed $(DRIVER_CRASH_SEED))

## executor-churn: a pipeline on a standalone cluster with dynamic allocation, EXECUTOR_CHURN (default 20) executors
## removed mid-stream and two decommissioned with a write task running: exactly once, and its transactional ids
## counted against the task slots at once (tests/test_elastic_executors.py; make test runs it with 3)
executor-churn: setup
	EOS_KAFKA_EXECUTOR_CHURN=$(EXECUTOR_CHURN) $(PY) -m pytest -n 0 tests/test_elastic_executors.py $(PYTEST_ARGS)

## compat: the compatibility matrix (docs/compatibility.md): the compat tests on every supported Kafka
## broker, PySpark and the lowest confluent-kafka; COMPAT_ARGS="--row kafka-4.4.0" for one row
compat: setup
	$(PY) -m devtools.compat $(COMPAT_ARGS)

## release-tests: the tests too long for every run (the chaos smoke, older PySpark): before every release
release-tests: setup
	$(PY) -m pytest -m release $(PYTEST_ARGS)

$(VENV)/.bench-installed: $(STAMP)
	$(PY) -m pip install --quiet --no-compile -e '.[bench]' --config-settings editable_mode=compat
	touch $@

$(VENV)/.release-installed: $(STAMP)
	$(PY) -m pip install --quiet --no-compile -e '.[release]' --config-settings editable_mode=compat
	touch $@

## model: model-check every protocol (attempt fencing, progress records, the source's group commit) with spin (see docs/model/README.md)
model: spin
	$(PYTHON) docs/model/check.py

## spin: install the spin model checker (Debian/Ubuntu package spin) if it is missing
spin:
	command -v spin >/dev/null || (apt-get update -qq && apt-get install -y -qq spin)
