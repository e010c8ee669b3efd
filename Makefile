# Two front doors: `make serve` and `make test`. Both build .venv from pyproject.toml first
# (and the optional C speedups of setup.py where a C compiler exists):
# serve installs the broker alone, test adds the test toolchain and third-party clients.
# `make quick` is a first look: the unit tests (about a minute) on a lighter install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
QUICK := $(VENV)/.quick
STAMP := $(VENV)/.installed
# Byte-compile the sources once: where PYTHONDONTWRITEBYTECODE is set, every start of
# the commands would otherwise compile every module again (about 100 ms here).
COMPILE := $(BIN)/python -m compileall -q src >/dev/null
CHROMIUM := /usr/bin/chromium
PROMTOOL := /usr/bin/promtool
ETCD := /usr/bin/etcd
IP := /sbin/ip

.PHONY: serve test quick lint typecheck unit java-check bench example-spark proto clean

# What the install builds from beside pyproject.toml and setup.py: the optional C
# speedups, and TubeMQ's messages (docs/tubemq.md), whose *_pb2 modules setup.py
# generates from the .proto files; editing either reinstalls.
BUILT_FROM := pyproject.toml setup.py \
	src/trionsq/_speedups.c src/trionsq/_speedups_encode.c src/trionsq/_speedups_publish.c \
	src/trionsq/_speedups_replica.c src/trionsq/_speedups_append.c $(wildcard src/trionsq/protocol/tubemq_proto/*.proto)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME): $(BUILT_FROM) | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e .
	$(COMPILE)
	touch $(RUNTIME)

$(QUICK): $(BUILT_FROM) | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[unit]'
	$(COMPILE)
	touch $(RUNTIME) $(QUICK)

$(STAMP): $(BUILT_FROM) | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(COMPILE)
	$(BIN)/python -m trionsq.spark.precompile
	touch $(RUNTIME) $(QUICK) $(STAMP)

serve: $(RUNTIME)
	$(BIN)/trionsq serve $(ARGS)

test: lint typecheck unit

# tests/unit but its PySpark part: no PySpark, browser, JVM or root (the `unit` extra,
# without the `test` extra's PySpark, playwright and third-party clients).
quick: $(QUICK)
	$(BIN)/pytest -q tests/unit --ignore=tests/unit/spark $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) java-check | $(CHROMIUM) $(PROMTOOL) $(ETCD) $(IP)
	$(BIN)/pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

# tests/spark run PySpark, whose driver is a JVM: say what is missing at once rather than
# let every Spark test fail to start one.
java-check:
	@version=$$(java -XshowSettings:properties -version 2>&1 | sed -n 's/.*java.specification.version = //p'); \
	if [ "$${version%%.*}" -ge 17 ] 2>/dev/null; then :; else \
	echo "make test: tests/spark need Java 17 or newer (found: $${version:-none});" \
	"on Debian: apt-get install openjdk-17-jre-headless"; exit 1; fi

# tests/browser drive Debian's chromium through playwright (which downloads no browser);
# installed as root, as CI runs, when it is missing.
$(CHROMIUM):
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium

# tests/integration/test_metrics_lint.py runs Prometheus' own linter (`promtool check
# metrics`) on a broker's /metrics; Debian's prometheus package carries promtool (the
# server it also installs is not started: the test runs promtool only).
$(PROMTOOL):
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus

# tests/cluster start a real etcd (single node on loopback in a temp dir, three nodes for
# one test) for replication (docs/replication.md); Debian's etcd-server is etcd 3.4. Its
# package enables a service where systemd runs; the tests start their own, on free ports.
$(ETCD):
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server

# tests/cluster/test_network_partition.py makes its own network namespaces and veth
# pairs with iproute2's ip (as root, as CI runs).
$(IP):
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2

# The Spark example pipeline (docs/spark.md): its own broker, clicks in, counts out.
example-spark: $(STAMP)
	$(BIN)/python examples/spark_tag_counts.py $(ARGS)

# Regenerate the TubeMQ *_pb2 modules after editing a .proto without a reinstall (any
# target that installs does it too): setup.py's own step, with the venv's grpcio-tools.
proto: $(STAMP)
	$(BIN)/python setup.py --quiet build_proto

bench: $(STAMP)
	$(BIN)/python benchmarks/protocol.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
	rm -f src/trionsq/protocol/tubemq_proto/*_pb2.py src/trionsq/protocol/tubemq_proto/*_pb2.pyi
