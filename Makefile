# The single entry point. `make install` then `make test` on a fresh Debian machine.
PY        ?= .venv/bin/python
DATA_DIR  ?= /var/lib/walfs/main
MOUNTPOINT ?= /mnt/wal
# make install START=0 installs without mounting (CI does this).
START     ?= 1
# openjdk-17-jre-headless: Java for PySpark (the Spark data source; the README's tour).
# openssl: the Kafka auth tests make their TLS certificates with it.
# strace: tests/test_single_append.py counts the write syscalls of single appends.
# iproute2: tests/test_cluster_netns.py puts two mounts in two network namespaces (ip netns).
APT_PACKAGES = build-essential pkg-config fuse3 libfuse3-dev liburing-dev attr kcat procps util-linux systemd strace iproute2 \
	openjdk-17-jre-headless openssl

.PHONY: install deps venv start testdeps kafka test lint ctest bench bench-figures bench-ab nullkafka walrus-baseline bench-single cluster cluster-stop bench-kafka torture fuzz fuzz-mount clean

install: deps venv
	install -m 755 mount/mount.fuse.walfs /sbin/mount.fuse.walfs
	ln -sf "$(CURDIR)/.venv/bin/walfs" /usr/local/bin/walfs
	install -d /etc/walfs && install -m 644 systemd/walfs@.service /etc/systemd/system/walfs@.service 2>/dev/null || true
	@if [ "$(START)" = 1 ]; then $(MAKE) --no-print-directory start; fi

deps:
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); fi
	@command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm)

venv:
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q -U pip setuptools wheel
	$(PY) -m pip install -q -e '.[spark]'

# The main job: the default data directory mounted at $(MOUNTPOINT).
start:
	@if mountpoint -q $(MOUNTPOINT); then echo "$(MOUNTPOINT) is already mounted"; else \
		mkdir -p $(DATA_DIR) $(MOUNTPOINT) && .venv/bin/walfs mount $(DATA_DIR) $(MOUNTPOINT) && \
		echo "walfs: $(DATA_DIR) mounted at $(MOUNTPOINT); try: echo hello >> $(MOUNTPOINT)/orders"; fi

test: testdeps lint ctest
	$(PY) -m pytest -q --durations=30 tests

testdeps: kafka tests/js/node_modules nullkafka
	$(PY) -m pip install -q -e '.[test]'

# KafkaJS and its codecs for tests/test_kafka_kafkajs.py, at the versions package-lock.json pins.
tests/js/node_modules: tests/js/package.json tests/js/package-lock.json
	@command -v npm >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm)
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch tests/js/node_modules

# Apache Kafka 4.1.1 (broker, CLI and perf tools) from Maven Central, for the reference tests
# and bench/kafka/: the class path goes to kafka/classpath.txt (tests/real_kafka.py reads it).
kafka: kafka/classpath.txt
kafka/classpath.txt: kafka/pom.xml
	@command -v mvn >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven)
	mvn -q -B -f kafka/pom.xml dependency:build-classpath -Dmdep.outputFile=classpath.txt

lint: testdeps
	$(PY) -m ruff check walfs pyspark_walfs tests bench tools
	$(PY) -m mypy walfs pyspark_walfs

# The C core compiles without a warning under -Wall -Wextra (cffi builds it with -Werror).
ctest:
	for f in csrc/*.c; do gcc -std=gnu11 -O2 -Wall -Wextra -Werror -fsyntax-only $$f || exit 1; done

# Every lasting benchmark at small sizes (--quick: a few minutes each at most, still real),
# each with its baseline in the same run; JSON to $(BENCH_OUT)/<part>.json (docs/benchmarks.md).
# A subset: make bench BENCH_PARTS="engine mount".
BENCH_OUT   ?= bench/results/runs
BENCH_PARTS ?= engine single-append mount kafka kafka-wire fetch-rtt vs-kafka spark spark-sink retention cluster cluster-open topics cursors
.PHONY: $(addprefix bench-quick-,$(BENCH_PARTS))
bench: $(addprefix bench-quick-,$(BENCH_PARTS))
$(addprefix bench-quick-,$(BENCH_PARTS)): | $(BENCH_OUT)
$(BENCH_OUT):
	mkdir -p $@
bench-quick-engine:
	$(PY) bench/engine/bench_engine.py --quick --out $(BENCH_OUT)/engine.json >/dev/null
bench-quick-single-append: walrus-baseline
	$(PY) bench/engine/bench_single_append.py --quick --out $(BENCH_OUT)/single_append.json >/dev/null
bench-quick-mount:
	$(PY) bench/mount/bench_mount.py --quick --out $(BENCH_OUT)/mount.json >/dev/null
bench-quick-kafka:
	$(PY) bench/kafka/bench_kafka.py --quick --out $(BENCH_OUT)/kafka.json >/dev/null
bench-quick-kafka-wire:
	$(PY) bench/kafka/bench_kafka_wire.py --quick --out $(BENCH_OUT)/kafka_wire.json
bench-quick-fetch-rtt: kafka
	$(PY) bench/kafka/bench_fetch_rtt.py --quick --out $(BENCH_OUT)/fetch_rtt.json
bench-quick-vs-kafka: kafka nullkafka
	$(PY) bench/kafka/bench_vs_kafka.py --quick --sizes 1KiB,16KiB --producers 1 --ceiling --out $(BENCH_OUT)/vs_kafka.json
bench-quick-spark:
	$(PY) bench/spark/bench_spark.py --quick --out $(BENCH_OUT)/spark.json >/dev/null
bench-quick-spark-sink:
	$(PY) bench/spark/bench_spark_sink.py --quick --out $(BENCH_OUT)/spark_sink.json >/dev/null
bench-quick-retention:
	$(PY) bench/retention/bench_retention.py --quick --out $(BENCH_OUT)/retention.json >/dev/null
bench-quick-cursors:
	$(PY) bench/engine/bench_cursors.py --quick --out $(BENCH_OUT)/cursors.json >/dev/null
bench-quick-topics: kafka
	$(PY) bench/engine/bench_topics.py --quick --out $(BENCH_OUT)/topics.json >/dev/null
bench-quick-cluster: kafka
	$(PY) bench/cluster/bench_cluster.py --quick --out $(BENCH_OUT)/cluster.json
bench-quick-cluster-open: kafka
	$(PY) bench/cluster/bench_cluster_open.py --quick --out $(BENCH_OUT)/cluster_open.json

# The charts of docs/benchmarks.md (SVG in docs/figures/) from the results kept in bench/results/.
bench-figures:
	$(PY) bench/figures.py --results bench/results --out docs/figures

# Before/after in one run: the engine, single-append, mount and Kafka-face benchmarks, each
# through bench/ab_trees.py (the two trees alternate every round; OLD must have its C built
# in place: python setup.py build_ext --inplace). AB_ARGS= (empty) for the full sizes.
AB_ROUNDS ?= 3
AB_ARGS   ?= --quick
AB_OUT    ?= bench/results/runs
bench-ab: walrus-baseline
	@test -n "$(OLD)" || { echo "usage: make bench-ab OLD=<old tree, its C built in place>"; exit 1; }
	mkdir -p $(AB_OUT)
	for b in engine/bench_engine engine/bench_single_append mount/bench_mount kafka/bench_kafka kafka/bench_kafka_wire; do \
		$(PY) bench/ab_trees.py --old $(OLD) --new . --rounds $(AB_ROUNDS) --out $(AB_OUT)/ab-$$(basename $$b).json \
			-- bench/$$b.py $(AB_ARGS) || exit 1; done

# The seed's crate (walrus-rust 0.2.0, from crates.io through cargo) as the baseline of
# one append per call: bench/engine/walrus_baseline. cargo comes from the Debian package when it
# is not installed already (rustup's works as well).
walrus-baseline:
	@command -v cargo >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo)
	cargo build --quiet --release --manifest-path bench/engine/walrus_baseline/Cargo.toml

# A Kafka-wire server that keeps records in memory and costs almost nothing (Go 1.26, which
# franz-go's kmsg v1.15.1 needs, from the module proxy): bench/kafka/bench_vs_kafka.py --ceiling.
nullkafka:
	@command -v go >/dev/null || { echo "make nullkafka needs Go 1.26 or later (https://go.dev/dl/)"; exit 1; }
	cd bench/kafka/nullkafka && go build -o nullkafka .

bench-single: walrus-baseline
	$(PY) bench/engine/bench_single_append.py

# A real 3-node Kafka cluster on this machine with walfs mounted on it (docs/cluster.md).
CLUSTER_DIR   ?= /var/lib/walfs/kafka-cluster
CLUSTER_MOUNT ?= /mnt/wal-cluster
cluster: kafka
	$(PY) tools/kafka_cluster.py start $(CLUSTER_DIR)
	mkdir -p $(CLUSTER_MOUNT)
	.venv/bin/walfs mount "kafka://$$($(PY) tools/kafka_cluster.py bootstrap $(CLUSTER_DIR))/main" $(CLUSTER_MOUNT)
	@echo "walfs on Kafka mounted at $(CLUSTER_MOUNT); try: echo hello >> $(CLUSTER_MOUNT)/orders"

cluster-stop:
	-fusermount3 -u $(CLUSTER_MOUNT)
	$(PY) tools/kafka_cluster.py stop $(CLUSTER_DIR)

# walfs serve against a real single-node Kafka with Kafka's own perf tools (docs/benchmarks.md).
# The full matrix takes about an hour on a quiet two-core machine; ARGS=--quick for a smoke run,
# ARGS="--baseline REF" adds walfs serve of an older commit to the same run.
bench-kafka: testdeps
	$(PY) bench/kafka/bench_vs_kafka.py $(ARGS)

# Crash and damage torture (not in CI; minutes to hours; docs/durability.md). Sizes from the
# environment: TORTURE_MOUNT_CYCLES, TORTURE_WRITERS, TORTURE_POWERCUT_CYCLES,
# WALFS_FUZZ_CASES, TORTURE_SEED; JSON summary to stdout and $(TORTURE_OUT).
TORTURE_OUT ?= torture-summary.json
torture: testdeps
	TORTURE_OUT=$(TORTURE_OUT) $(PY) tools/torture.py

# The damage fuzzer at length (tests/damage_fuzz.py; CI runs a few hundred cases): WALFS_FUZZ_CASES
# damaged WALs from TORTURE_SEED, a JSON summary on stdout.
fuzz:
	$(PY) tests/damage_fuzz.py --cases $${WALFS_FUZZ_CASES:-1000} --first-seed $${TORTURE_SEED:-1}

# The mount fuzzer at length (tests/test_mount_fuzz.py; CI runs 300 calls per user).
FUZZ_OPS ?= 5000
fuzz-mount: testdeps
	WALFS_FUZZ_OPS=$(FUZZ_OPS) $(PY) -m pytest -q -s tests/test_mount_fuzz.py

clean:
	rm -rf build *.egg-info walfs/_core*.so bench/engine/walrus_baseline/target
