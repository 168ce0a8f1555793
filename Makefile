# The single entry point. `make install` then `make test` on a fresh Debian machine.
PY        ?= .venv/bin/python
DATA_DIR  ?= /var/lib/walfs/main
MOUNTPOINT ?= /mnt/wal
# make install START=0 installs without mounting (CI does this).
START     ?= 1
APT_PACKAGES = build-essential pkg-config fuse3 libfuse3-dev liburing-dev attr kcat procps util-linux systemd openssl

.PHONY: install deps venv start testdeps test lint ctest bench torture fuzz-mount clean

install: deps venv
	install -m 755 mount/mount.fuse.walfs /sbin/mount.fuse.walfs
	ln -sf "$(CURDIR)/.venv/bin/walfs" /usr/local/bin/walfs
	install -d /etc/walfs && install -m 644 systemd/walfs@.service /etc/systemd/system/walfs@.service 2>/dev/null || true
	@if [ "$(START)" = 1 ]; then $(MAKE) --no-print-directory start; fi

deps:
	@if ! dpkg -s $(APT_PACKAGES) >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); fi
	@command -v java >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless)

venv:
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q -U pip setuptools wheel
	$(PY) -m pip install -q -e .

# The main job: the default data directory mounted at $(MOUNTPOINT).
start:
	@if mountpoint -q $(MOUNTPOINT); then echo "$(MOUNTPOINT) is already mounted"; else \
		mkdir -p $(DATA_DIR) $(MOUNTPOINT) && .venv/bin/walfs mount $(DATA_DIR) $(MOUNTPOINT) && \
		echo "walfs: $(DATA_DIR) mounted at $(MOUNTPOINT); try: echo hello >> $(MOUNTPOINT)/orders"; fi

test: testdeps lint ctest
	$(PY) -m pytest -q tests

testdeps:
	$(PY) -m pip install -q -e '.[test]'

lint: testdeps
	$(PY) -m ruff check walfs pyspark_walfs tests bench tools
	$(PY) -m mypy walfs pyspark_walfs

# The C core compiles without a warning under -Wall -Wextra (cffi builds it with -Werror).
ctest:
	for f in csrc/*.c; do gcc -std=gnu11 -O2 -Wall -Wextra -Werror -fsyntax-only $$f || exit 1; done

bench:
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_mount.py
	$(PY) bench/bench_spark.py
	$(PY) bench/bench_kafka.py

# Crash and damage torture (not in CI; minutes to hours; docs/durability.md). Sizes from the
# environment: TORTURE_MOUNT_CYCLES, TORTURE_WRITERS, TORTURE_POWERCUT_CYCLES,
# WALFS_FUZZ_CASES, TORTURE_SEED; JSON summary to stdout and $(TORTURE_OUT).
TORTURE_OUT ?= torture-summary.json
torture: testdeps
	TORTURE_OUT=$(TORTURE_OUT) $(PY) tools/torture.py

# The mount fuzzer at length (tests/test_mount_fuzz.py; CI runs 300 calls per user).
FUZZ_OPS ?= 5000
fuzz-mount: testdeps
	WALFS_FUZZ_OPS=$(FUZZ_OPS) $(PY) -m pytest -q -s tests/test_mount_fuzz.py

clean:
	rm -rf build *.egg-info walfs/_core*.so
