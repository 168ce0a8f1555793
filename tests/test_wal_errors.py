"""Bad input gets a clear exception, and the WAL stays usable with nothing lost."""

import errno
import os
import subprocess
import sys

import pytest
from conftest import REPO, SMALL
from segment_files import segment_bytes

import walfs
from walfs.local import debug


@pytest.mark.parametrize("topic", ["", "a/b", "nul\0byte", ".", "..", "x" * 250, "é" * 125, b"bytes", None])
def test_bad_topic_names(open_wal, topic):
    w = open_wal()
    with pytest.raises(walfs.InvalidTopicError):
        w.append(topic, b"x")
    with pytest.raises(walfs.InvalidTopicError):
        w.read(topic, 0)
    assert w.topics() == []


def test_longest_topic_name_is_fine(open_wal):
    w = open_wal()
    name = "x" * 249
    w.append(name, b"ok")
    w.close()
    assert open_wal().read(name, 0) == [b"ok"]


@pytest.mark.parametrize("partition", [-1, 2**31, 1.5, "0", True])
def test_bad_partitions(open_wal, partition):
    w = open_wal()
    with pytest.raises(walfs.InvalidPartitionError):
        w.append("t", b"x", partition=partition)


def test_bad_offsets(open_wal):
    w = open_wal()
    w.append("t", [b"a", b"b"])
    for bad in (-1, 3, 10**12):
        with pytest.raises(walfs.OffsetOutOfRangeError):
            w.read("t", bad)
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.read("missing", 1)
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.read_bytes("t", -1, 10)
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.trim("t", 3)
    with pytest.raises(walfs.OffsetOutOfRangeError):
        w.commit("g", "t", 3)
    assert w.read("t", 0) == [b"a", b"b"]


def test_bad_batches(open_wal):
    w = open_wal()
    with pytest.raises(ValueError):
        w.append("t", [])
    with pytest.raises(TypeError):
        w.append("t", "not bytes")
    with pytest.raises(TypeError):
        w.append("t", [b"a"], key=b"one record only")
    with pytest.raises(walfs.RecordTooLargeError):
        w.append("t", [b"ok", b"x" * (2 << 20)])
    assert w.info("t").high_watermark == 0  # the whole batch was refused
    assert w.append("t", b"fine") == 0


def test_bad_options(wal_dir):
    with pytest.raises(ValueError):
        walfs.Wal(wal_dir, fsync="sometimes")
    with pytest.raises(walfs.WalIOError):
        walfs.Wal(wal_dir, block_size=1000)
    with pytest.raises(ValueError):
        walfs.Wal(wal_dir, org_id=-1)


def test_second_process_gets_a_lock_error(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    code = (
        "import sys, walfs\n"
        "try:\n    walfs.Wal(sys.argv[1])\nexcept walfs.WalLockedError as e:\n    print('locked', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, wal_dir], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert out.stdout.startswith("locked"), out.stderr
    # A read-only open takes no lock and sees what was appended.
    ro = walfs.Wal(wal_dir, read_only=True)
    assert ro.read("t", 0) == [b"x"]
    with pytest.raises(walfs.ReadOnlyError):
        ro.append("t", b"y")
    ro.close()


def test_same_process_second_open_is_locked_too(open_wal, wal_dir):
    open_wal()
    with pytest.raises(walfs.WalLockedError):
        walfs.Wal(wal_dir, **SMALL)


def test_closed_wal_refuses_calls(open_wal):
    w = open_wal()
    w.close()
    w.close()  # idempotent
    with pytest.raises(walfs.WalClosedError):
        w.append("t", b"x")


def test_corrupt_catalog_header_is_reported(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    w.close()
    for name in ("streams.cat", "streams.cat.mirror"):  # one copy: healed (test_metadata_heal_catalog.py)
        with open(os.path.join(wal_dir, name), "r+b") as f:
            f.write(b"GARBAGE!")
    with pytest.raises(walfs.WalCorruptError):
        walfs.Wal(wal_dir, **SMALL)


def test_missing_catalog_with_segments_is_reported(open_wal, wal_dir):
    w = open_wal()
    w.append("t", b"x")
    w.close()
    os.unlink(os.path.join(wal_dir, "streams.cat"))
    os.unlink(os.path.join(wal_dir, "streams.cat.mirror"))  # one copy: healed (test_metadata_heal_catalog.py)
    with pytest.raises(walfs.WalCorruptError):
        walfs.Wal(wal_dir, **SMALL)


def test_write_error_fails_only_that_append(open_wal):
    w = open_wal(test_mode=True)
    w.append("t", [b"a", b"b"])
    debug.inject_fault(w, "write", errno.EIO, after=0, count=1)
    with pytest.raises(walfs.WalIOError) as e:
        w.append("t", [b"lost"] * 100)
    assert e.value.errno == errno.EIO
    assert w.info("t").high_watermark == 2
    assert w.append("t", b"c") == 2
    w.close()
    w = open_wal()
    assert w.read("t", 0) == [b"a", b"b", b"c"]


def test_fsync_error_fails_the_wal_until_reopen(open_wal):
    w = open_wal(test_mode=True, fsync="always")
    w.append("t", b"durable")
    debug.inject_fault(w, "sync", errno.EIO, after=0, count=1)
    with pytest.raises(walfs.WalFailedError):
        w.append("t", b"not acknowledged")
    with pytest.raises(walfs.WalFailedError):
        w.append("t", b"refused")
    with pytest.raises(walfs.WalFailedError):
        w.sync()
    assert w.read("t", 0)[0] == b"durable"  # reads still work
    with pytest.raises(walfs.WalError):
        w.close()
    w = open_wal()
    got = w.read("t", 0)
    assert got[0] == b"durable" and b"refused" not in got
    assert w.append("t", b"after reopen") == len(got)


def test_fsync_error_reaches_interval_mode_callers(open_wal):
    w = open_wal(test_mode=True, fsync="interval", fsync_interval_ms=10)
    w.append("t", b"x")
    debug.inject_fault(w, "sync", errno.EIO, after=0, count=1)
    w.append("t", b"y")
    with pytest.raises(walfs.WalFailedError):
        w.sync()
    with pytest.raises(walfs.WalFailedError):
        w.append("t", b"z")


def test_injected_enospc_on_new_segment(open_wal):
    w = open_wal(test_mode=True)
    debug.inject_fault(w, "alloc", errno.ENOSPC, after=0, count=1)
    with pytest.raises(walfs.WalIOError) as e:
        w.append("t", [b"x" * 1000] * 2000)  # needs new segments
    assert e.value.errno == errno.ENOSPC
    assert w.info("t").high_watermark == 0
    assert w.append("t", [b"x" * 1000] * 2000) == 0  # space is back
    w.close()
    assert open_wal().info("t").high_watermark == 2000


def tmpfs(path: str, size: str) -> None:
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)


def test_real_disk_full_on_a_small_tmpfs(tmp_path):
    mnt = str(tmp_path / "small")
    tmpfs(mnt, "6m")
    try:
        filler = os.path.join(mnt, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (2 << 20))
        w = walfs.Wal(os.path.join(mnt, "wal"), fsync="never", segment_size=1 << 20, block_size=64 << 10)
        acked = []
        with pytest.raises(walfs.WalIOError) as e:
            for i in range(100_000):
                w.append("t", b"r%06d" % i + b"." * 1000)
                acked.append(i)
        assert e.value.errno == errno.ENOSPC
        assert len(acked) > 1000
        assert w.read("t", len(acked) - 1) == [b"r%06d" % acked[-1] + b"." * 1000]
        os.unlink(filler)  # space returns: the same handle works again
        w.append("t", b"after")
        w.close()
        w = walfs.Wal(os.path.join(mnt, "wal"))
        assert w.info("t").high_watermark == len(acked) + 1
        assert w.read("t", 0, max_records=1) == [b"r000000" + b"." * 1000]
        w.close()
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)


def test_min_free_refuses_early_and_retention_brings_appends_back(tmp_path):
    # Issue 10: a reserve keeps room for catalog entries, cursors and settings; once a
    # trim or retention frees segments, the same handle appends again (no reopen).
    mnt = str(tmp_path / "small")
    tmpfs(mnt, "8m")
    try:
        w = walfs.Wal(
            os.path.join(mnt, "wal"), fsync="never", segment_size=1 << 20, block_size=64 << 10,
            min_free_bytes=5 << 20, reclaim_interval_s=3600,
        )
        acked = 0
        with pytest.raises(walfs.WalIOError) as e:
            for i in range(100_000):
                w.append("t", b"r%06d" % i + b"." * 1000)
                acked += 1
        assert e.value.errno == errno.ENOSPC
        st = os.statvfs(mnt)
        assert st.f_bavail * st.f_frsize >= 4 << 20  # the reserve is still free
        w.commit("g", "t", acked)  # cursors still get written
        full = segment_bytes(os.path.join(mnt, "wal"))
        w.retention("t", retention_bytes=100_000)
        w.engine.apply_retention()
        # Setting a limit wakes the background pass, which may reclaim before this call
        # does: what counts is that segment files went away, whoever deleted them.
        w.engine.reclaim()
        assert segment_bytes(os.path.join(mnt, "wal")) < full
        off = w.append("t", b"after")
        assert off == acked
        w.close()
        w = walfs.Wal(os.path.join(mnt, "wal"), min_free_bytes=5 << 20)
        assert w.read("t", acked) == [b"after"]
        assert w.committed("g", "t") == acked
        w.close()
    finally:
        subprocess.run(["umount", "-l", mnt], check=False)
