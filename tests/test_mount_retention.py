"""Trimming and retention through the mount (issue 10): setfattr trims and sets a topic's
policy, refused values give EINVAL, settings survive a remount, and the daemon's
background retention gives the space back while appends go on."""

from __future__ import annotations

import errno
import os
import subprocess
import time

import pytest
from conftest_mount import Mount, wait_until
from segment_files import segment_bytes
from test_mount_permissions import as_nobody, mount_for_others, shared_base  # noqa: F401 (a fixture)

pytest_plugins = ["conftest_mount"]


def xattr(m: Mount, name: str, path: str = "t") -> str:
    return m.out(f"getfattr --only-values -n user.walfs.{name} {path}")


def test_setfattr_trims_and_sets_retention_that_survives_a_remount(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    try:
        m.sh("seq 1 100 >> t")
        m.sh("setfattr -n user.walfs.low_watermark -v 40 t")
        assert xattr(m, "low_watermark") == "40"
        assert xattr(m, "high_watermark") == "100"  # offsets never change
        assert m.out("head -n 1 t") == "41\n"  # the file starts at the first kept record
        for bad in ("x", "-5", "1.5", "999"):  # 999 is past the end
            res = m.sh(f"setfattr -n user.walfs.low_watermark -v {bad} t", check=False)
            assert res.returncode != 0 and b"Invalid argument" in res.stderr, bad
        assert xattr(m, "retention_ms") == "-1"
        m.sh("setfattr -n user.walfs.retention_ms -v 3600000 t")
        m.sh("setfattr -n user.walfs.retention_bytes -v 1000000 t")
        res = m.sh("setfattr -n user.walfs.retention_bytes -v lots t", check=False)
        assert res.returncode != 0 and b"Invalid argument" in res.stderr
        # Past a Kafka long (found by the mount fuzzer: EIO and a traceback, before that a
        # stored limit that broke every retention pass).
        for huge in ("9223372036854775808", "9" * 30, "9000000000000000000T"):
            res = m.sh(f"setfattr -n user.walfs.retention_ms -v {huge} t", check=False)
            assert res.returncode != 0 and b"Invalid argument" in res.stderr, huge
        dump = m.out("getfattr -d t")
        assert 'user.walfs.retention_ms="3600000"' in dump
        assert 'user.walfs.retention_bytes="1000000"' in dump
        res = m.sh("setfattr -n user.walfs.something -v 1 t", check=False)
        assert res.returncode != 0
    finally:
        m.stop()
    m.start()
    try:
        assert xattr(m, "retention_ms") == "3600000"
        assert xattr(m, "retention_bytes") == "1000000"
        assert xattr(m, "low_watermark") == "40"
        m.sh("setfattr -n user.walfs.retention_ms -v default t")
        assert xattr(m, "retention_ms") == "-1"
    finally:
        m.stop()


def test_background_retention_gives_space_back_while_appends_go_on(make_mount) -> None:
    m: Mount = make_mount()
    m.start("--segment-size", "1M", "--block-size", "64K", "--retention-bytes", "200K")
    try:
        line = "x" * 999
        m.sh(f"for i in $(seq 1 40); do for j in $(seq 1 100); do echo {line}; done >> t; done")
        deadline = time.monotonic() + 60  # bounds a hang; nothing is timed

        def segments() -> int:
            return len([f for f in os.listdir(m.data) if f.startswith("seg-")])

        def kept() -> int:
            return int(xattr(m, "byte_size")) - int(xattr(m, "low_watermark")) * 1000

        # A limit under one segment keeps the file being filled (retention.file_budget).
        while segments() > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert segments() == 1
        size = int(xattr(m, "byte_size"))
        low = int(xattr(m, "low_watermark"))
        assert int(xattr(m, "high_watermark")) == 4000
        assert 0 < size - low * 1000 <= 1 << 20
        m.sh("echo after >> t")
        assert int(xattr(m, "high_watermark")) == 4001
    finally:
        m.stop()


def test_walfs_trim_and_retention_commands_on_a_mount_and_on_a_data_directory(make_mount) -> None:
    from conftest_mount import cli

    m: Mount = make_mount()
    m.start()
    try:
        m.sh("seq 1 50 >> t")
        assert cli("trim", str(m.path), "t", "20").returncode == 0
        assert xattr(m, "low_watermark") == "20"
        res = cli("retention", str(m.path), "t", "--ms", "5000", "--bytes", "1M")
        assert res.stdout.split() == ["retention_ms=5000", "retention_bytes=1048576"]
        res = cli("trim", str(m.path), "t", "999", check=False)
        assert res.returncode == 1
        assert "offset 999 is past the end of 't'[0] (high watermark 50)" in res.stderr
    finally:
        m.stop()
    # Unmounted: the same commands open the data directory.
    assert cli("trim", str(m.data), "t", "30").returncode == 0
    res = cli("retention", str(m.data), "t")
    assert res.stdout.split() == ["retention_ms=5000", "retention_bytes=1048576"]
    res = cli("retention", str(m.data), "t", "--ms", "-1")
    assert "retention_ms=-1" in res.stdout.split()
    m.start()
    try:
        assert xattr(m, "low_watermark") == "30"
        assert xattr(m, "retention_ms") == "-1"
    finally:
        m.stop()


def test_rm_deletes_a_topic_only_when_allowed(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    try:
        m.sh("echo a >> t")
        res = m.sh("rm t", check=False)
        assert res.returncode != 0 and b"Operation not permitted" in res.stderr
        assert m.out("cat t") == "a\n"
    finally:
        m.stop()
    m.start("--allow-delete")
    try:
        m.sh("mkdir partition=1; echo p1 >> partition=1/t; mkdir .consumers/g; cat .consumers/g/t >/dev/null")
        reader = open(m.path / "t", "rb")  # a reader holding the file across the delete
        try:
            m.sh("rm t")
            assert m.out("ls").split() == ["partition=0", "partition=1"]
            assert m.out("cat partition=1/t") == "p1\n"  # the other partition stays
            assert reader.read() in (b"", b"a\n")  # the end of the old stream, no crash
        finally:
            reader.close()
        m.sh("echo b >> t")  # the name starts again from offset 0
        assert m.out("cat t") == "b\n"
        assert xattr(m, "low_watermark") == "0"
        assert xattr(m, "high_watermark") == "1"
        assert m.out("cat .consumers/g/t") == "b\n"  # the group's old cursor went with the topic
    finally:
        m.stop()


PAGE = 4096


def trimmed_and_kept_reads(m: Mount, full: bytes, low: int, before: int) -> None:
    """After a trim to `low` (records of PAGE bytes): the file (a new open) starts at the
    first kept record, whole pages and all; a file opened before the trim (`before`, an
    fd) keeps its positions, where the trimmed pages give ENODATA and the kept ones
    read back byte for byte."""
    kept = full[low * PAGE :]
    for cmd in ("cat t", f"dd if=t bs={PAGE} status=none", f"dd if=t bs={PAGE} skip=1 status=none"):
        got = m.sh(cmd).stdout
        assert got == (kept if "skip" not in cmd else kept[PAGE:]), cmd
    assert os.stat(m.path / "t").st_size == len(kept)
    for page in (0, low - 1):
        with pytest.raises(OSError) as e:
            os.pread(before, PAGE, page * PAGE)
        assert e.value.errno == errno.ENODATA
    assert os.pread(before, len(full), low * PAGE) == kept
    assert os.fstat(before).st_size == len(full)
    assert int(xattr(m, "low_watermark")) == low
    assert int(xattr(m, "high_watermark")) == len(full) // PAGE  # offsets never change
    assert int(xattr(m, "byte_size")) == len(full)  # nor the stream's byte positions


def test_a_trimmed_topic_reads_from_its_first_kept_record_after_a_trim_and_after_retention_by_age(
    make_mount, monkeypatch, tmp_path
) -> None:
    # The daemon's background pass reads its clock from this file (retention.now_ms):
    # time moves only when the test says so. Empty: the wall clock is not used either,
    # "0" keeps every record young.
    clock = tmp_path / "clock"
    clock.write_text("0")
    monkeypatch.setenv("WALFS_TEST_CLOCK_FILE", str(clock))
    # One record per page, so that a page of a file opened before a trim is either
    # trimmed or kept (the kernel reads whole pages: docs/mount.md).
    records = [b"%05d " % i + b"r" * (PAGE - 7) + b"\n" for i in range(30)]
    src = tmp_path / "src"
    src.write_bytes(b"".join(records[:20]))
    m: Mount = make_mount()
    m.start()
    try:
        m.sh(f"cat {src} >> t")
        full = b"".join(records[:20])
        before = os.open(m.path / "t", os.O_RDONLY)
        try:
            assert m.sh("cat t").stdout == full  # pages now in the kernel's cache
            m.sh("setfattr -n user.walfs.low_watermark -v 5 t")
            trimmed_and_kept_reads(m, full, 5, before)
        finally:
            os.close(before)

        # By age: records appended before `cut` get older than retention_ms once the
        # clock reads cut + retention_ms; the later ones stay.
        m.sh("setfattr -n user.walfs.retention_ms -v 60000 t")
        time.sleep(0.01)
        cut = int(time.time() * 1000)
        time.sleep(0.01)
        src.write_bytes(b"".join(records[20:]))
        m.sh(f"cat {src} >> t")
        full = b"".join(records)
        before = os.open(m.path / "t", os.O_RDONLY)  # starts at record 5
        try:
            assert os.pread(before, PAGE, 0) == records[5]
            clock.write_text(str(cut + 60_000))
            wait_until(
                lambda: xattr(m, "low_watermark") == "20", timeout=60, what="the background retention pass"
            )
            # The pass tells the mount after it trimmed; the mount then gives the name a
            # new inode (asynchronously: wait for that, bounded).
            wait_until(
                lambda: m.sh("head -c 5 t").stdout == b"00020", timeout=30, what="the name's new inode"
            )
            with pytest.raises(OSError) as e:
                os.pread(before, PAGE, 0)  # what it had read before is gone
            assert e.value.errno == errno.ENODATA
            assert os.pread(before, PAGE, 15 * PAGE) == records[20]  # its positions stay
        finally:
            os.close(before)
        assert m.sh("cat t").stdout == full[20 * PAGE :]
        m.sh("echo after >> t")  # appends go on after the pass
        assert xattr(m, "high_watermark") == "31"
        assert m.sh("cat t").stdout == full[20 * PAGE :] + b"after\n"
    finally:
        m.stop()


def test_a_full_disk_comes_back_through_a_trim_and_retention_without_a_remount(make_mount, tmp_path) -> None:
    """The data directory on a small tmpfs: appends fill it to ENOSPC; a setfattr trim
    gives the space back (df and statvfs on the mount show it) and appends work again on
    the same mount; then a size limit set through an xattr keeps it from filling again."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(small)], check=True)
    m: Mount = make_mount("full")
    try:
        m.data = small / "data"
        m.start("--segment-size", "1M", "--block-size", "64K")

        def avail() -> int:
            st = os.statvfs(m.path)
            return st.f_bavail * st.f_frsize

        def df_avail() -> int:
            return int(m.out("df --output=avail -B1 . | tail -1"))

        chunk = b"z" * 1023 + b"\n"
        with pytest.raises(OSError) as info:
            with open(m.path / "t", "ab", buffering=0) as f:
                for _ in range(100_000):
                    f.write(chunk * 16)
        assert info.value.errno == errno.ENOSPC
        high = int(xattr(m, "high_watermark"))
        assert high > 0 and int(xattr(m, "byte_size")) == high * 1024  # whole records only
        full = avail()
        assert full < 1 << 20

        m.sh(f"setfattr -n user.walfs.low_watermark -v {high} t")  # everything goes
        # Reclamation runs in the background (every 10 s): wait for it, bounded.
        wait_until(lambda: avail() > full + (4 << 20), timeout=60, what="space to come back")
        assert df_avail() > full + (4 << 20)  # what df shows, through the mount
        m.sh("echo more >> t")  # the same mount appends again
        assert int(xattr(m, "high_watermark")) == high + 1  # offsets go on
        assert m.out("cat t") == "more\n"  # the file starts at the first kept record

        # A size limit: more appends than the disk holds no longer fill it.
        m.sh("setfattr -n user.walfs.retention_bytes -v 2M t")
        with open(m.path / "t", "ab", buffering=0) as f:
            for _ in range(8):
                for _ in range(100):  # 1.6 MB a round, 13 MB in all
                    f.write(chunk * 16)
                # A pass runs once the stream is in more than the two files the limit
                # keeps, and an append that would take it to a fourth waits for it: the
                # segment files never hold more than the limit + one segment.
                assert segment_bytes(small / "data") <= 3 << 20
                wait_until(
                    lambda: int(xattr(m, "byte_size")) - int(xattr(m, "low_watermark")) * 1024 <= 2 << 20,
                    timeout=60,
                    what="retention to trim",
                )
        assert int(xattr(m, "high_watermark")) == high + 1 + 8 * 100 * 16
        m.stop()
    finally:
        m.cleanup()
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_only_users_with_write_permission_trim_set_retention_or_delete(shared_base) -> None:  # noqa: F811
    """A second, real user (uid 65534) on an --allow-delete mount: setfattr (trim, the
    retention settings) and rm give EACCES and change nothing; the owner's work."""
    m = mount_for_others(shared_base, "--allow-delete")
    try:
        m.sh("seq 1 10 >> t")
        for script in (
            "setfattr -n user.walfs.low_watermark -v 5 t",
            "setfattr -n user.walfs.retention_ms -v 1000 t",
            "setfattr -n user.walfs.retention_bytes -v 1K t",
            "rm t",
        ):
            r = as_nobody(m, script)
            assert r.returncode != 0 and b"Permission denied" in r.stderr, (script, r.stderr)
        assert as_nobody(m, "getfattr --only-values -n user.walfs.retention_ms t").stdout == b"-1"
        assert (xattr(m, "low_watermark"), xattr(m, "retention_bytes")) == ("0", "-1")
        assert m.out("cat t") == "".join(f"{i}\n" for i in range(1, 11))
        m.sh("setfattr -n user.walfs.low_watermark -v 5 t")  # the owner may
        m.sh("rm t")
        assert m.out("ls") == "partition=0\n"
    finally:
        m.stop()


def test_appends_past_the_limit_plus_one_segment_get_enospc_when_reclamation_fails(
    make_mount, monkeypatch
) -> None:
    """Reclamation fails in the daemon (an injected fault where it writes the catalog
    entries for the files it deletes): appends wait for room, then get ENOSPC instead of
    growing the disk past the limit + one segment; what they acknowledged stays readable;
    every other call still works."""
    monkeypatch.setenv("WALFS_TEST_FAULT", f"reclaim:{errno.EIO}:0")
    m: Mount = make_mount()
    m.start("--segment-size", "1M", "--block-size", "64K", "--retention-bytes", "2M")
    try:
        chunk = b"z" * 1023 + b"\n"
        written = 0
        with pytest.raises(OSError) as info:
            with open(m.path / "t", "ab", buffering=0) as f:
                for _ in range(1000):  # 16 MB if nothing held it back
                    f.write(chunk * 16)
                    written += 16
                    assert segment_bytes(m.data) <= 3 << 20
        assert info.value.errno == errno.ENOSPC
        assert segment_bytes(m.data) <= 3 << 20
        high = int(xattr(m, "high_watermark"))
        assert high == written and int(xattr(m, "byte_size")) == high * 1024  # whole records
        low = int(xattr(m, "low_watermark"))
        assert 0 < low < high
        assert m.out("head -n 1 t") == chunk.decode()  # the first kept record
        assert "retention made no room" in m.read_log()
        assert xattr(m, "retention_bytes") == str(2 << 20)  # the mount still answers
    finally:
        m.stop()
