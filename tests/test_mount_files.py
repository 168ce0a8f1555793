"""The tree and its files, driven by the everyday tools through bash."""

from __future__ import annotations

import errno
import os

import pytest
from conftest_mount import Mount

pytest_plugins = ["conftest_mount"]


def test_echo_cat_wc_grep(mount: Mount) -> None:
    mount.sh("echo 'order 1 paid' >> orders; echo 'order 2 open' >> orders")
    mount.sh("printf 'order 3 paid\\norder 4 paid\\n' >> orders")
    assert mount.out("cat orders") == "order 1 paid\norder 2 open\norder 3 paid\norder 4 paid\n"
    assert mount.out("wc -l < orders").strip() == "4"
    assert mount.out("grep -c paid orders").strip() == "3"
    assert mount.out("stat -c %s orders").strip() == str(4 * 13)
    assert mount.out("ls").split() == ["orders", "partition=0"]
    assert ".consumers" in mount.out("ls -a").split()
    assert mount.out("cat partition=0/orders") == mount.out("cat orders")


def test_partial_line_commits_at_close(mount: Mount) -> None:
    mount.sh("printf 'no newline' >> t")
    assert mount.out("cat t") == "no newline\n"
    # A line written in pieces through one open file is one record.
    mount.sh("{ printf 'a'; printf 'b'; printf 'c\\nd'; } >> t")
    assert mount.out("cat t") == "no newline\nabc\nd\n"
    assert os.getxattr(mount.path / "t", "user.walfs.high_watermark") == b"3"


def test_partial_line_held_until_newline(mount: Mount) -> None:
    fd = os.open(mount.path / "t", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"first\nsec")
        assert (mount.path / "t").read_bytes() == b"first\n"
        assert os.stat(mount.path / "t").st_size == 6
        os.write(fd, b"ond\n")
        assert (mount.path / "t").read_bytes() == b"first\nsecond\n"
        os.write(fd, b"third")
        os.fsync(fd)  # fsync commits the partial line too
        assert (mount.path / "t").read_bytes() == b"first\nsecond\nthird\n"
    finally:
        os.close(fd)


def test_binary_bytes(mount: Mount) -> None:
    payload = bytes(b for b in range(256) if b != 10)
    with open(mount.path / "bin", "ab") as f:
        f.write(payload + b"\n" + payload[::-1] + b"\n")
    assert (mount.path / "bin").read_bytes() == payload + b"\n" + payload[::-1] + b"\n"
    assert mount.out("wc -c < bin").strip() == str(2 * 256)


def test_dd_cp_and_mv_from_outside(mount: Mount, tmp_path) -> None:
    src = tmp_path / "src.txt"
    src.write_bytes(b"".join(b"line %d\n" % i for i in range(20000)))
    mount.sh(f"cp {src} copied")
    assert (mount.path / "copied").read_bytes() == src.read_bytes()
    mount.sh(f"dd if={src} of=dd_topic bs=1M oflag=append conv=notrunc status=none")
    assert (mount.path / "dd_topic").read_bytes() == src.read_bytes()
    other = tmp_path / "moved.txt"
    other.write_bytes(b"x\ny\n")
    mount.sh(f"mv {other} moved")  # across file systems: copy, then unlink the source
    assert (mount.path / "moved").read_bytes() == b"x\ny\n"
    assert not other.exists()
    # Only sequential writers may fill a new topic: cp onto an existing one is refused.
    res = mount.sh(f"cp {src} copied", check=False)
    assert res.returncode != 0 and b"Operation not permitted" in res.stderr
    assert (mount.path / "copied").read_bytes() == src.read_bytes()


def test_refused_calls_keep_data(mount: Mount) -> None:
    mount.sh("echo keep >> t")
    refused = {
        "echo x > t": "Operation not permitted",
        "truncate -s 0 t": "Operation not permitted",
        "rm t": "Operation not permitted",
        "mv t u": "Operation not permitted",
        "mkdir notapartition": "Operation not permitted",
        "rmdir partition=0": "Operation not permitted",
        "ln t hard": "Operation not permitted",
        "ln -s t soft": "Operation not permitted",
        "chmod 600 t": "Operation not permitted",
    }
    for script, message in refused.items():
        res = mount.sh(script, check=False)
        assert res.returncode != 0, script
        assert message.encode() in res.stderr, (script, res.stderr)
    assert mount.out("cat t") == "keep\n"
    assert mount.out("ls").split() == ["partition=0", "t"]


def test_refused_calls_errnos(mount: Mount) -> None:
    t = mount.path / "t"
    t.write_bytes(b"one\n")  # a new topic: a sequential writer may create it
    assert t.read_bytes() == b"one\n"

    def errno_of(fn: object, *args: object) -> int:
        assert callable(fn)
        with pytest.raises(OSError) as info:
            fn(*args)
        return info.value.errno or 0

    assert errno_of(os.open, t, os.O_WRONLY) == errno.EPERM
    assert errno_of(os.open, t, os.O_RDWR) == errno.EPERM
    assert errno_of(os.open, t, os.O_WRONLY | os.O_APPEND | os.O_TRUNC) == errno.EPERM
    assert errno_of(os.truncate, t, 0) == errno.EPERM
    fd = os.open(t, os.O_WRONLY | os.O_APPEND)
    try:
        assert errno_of(os.ftruncate, fd, 1) == errno.EPERM
        os.write(fd, b"two\n")
    finally:
        os.close(fd)
    assert errno_of(os.unlink, t) == errno.EPERM
    assert errno_of(os.rename, t, mount.path / "u") == errno.EPERM
    assert errno_of(os.rmdir, mount.path / "partition=0") == errno.EPERM
    assert errno_of(os.mkdir, mount.path / "x") == errno.EPERM
    assert errno_of(os.mkdir, mount.path / "partition=01") == errno.EPERM
    assert (
        errno_of(os.open, mount.path / ("n" * 250), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        == errno.ENAMETOOLONG
    )
    assert (
        errno_of(os.open, mount.path / "partition=x", os.O_WRONLY | os.O_CREAT | os.O_APPEND) == errno.EINVAL
    )
    assert errno_of(os.open, mount.path / "nope", os.O_RDONLY) == errno.ENOENT
    assert errno_of(os.setxattr, t, "user.x", b"1") == errno.ENOTSUP
    assert errno_of(os.mkfifo, mount.path / "fifo") == errno.EPERM
    assert errno_of(os.chown, t, 1, 1) == errno.EPERM
    # Writing at an offset through a sequential writer of a new topic.
    fd = os.open(mount.path / "new", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"a\n")
        assert errno_of(os.pwrite, fd, b"b\n", 0) == errno.EPERM
    finally:
        os.close(fd)
    assert t.read_bytes() == b"one\ntwo\n"
    assert (mount.path / "new").read_bytes() == b"a\n"
    name249 = "n" * 249
    with open(mount.path / name249, "ab") as f:
        f.write(b"long name ok\n")
    assert (mount.path / name249).read_bytes() == b"long name ok\n"


def test_partitions(mount: Mount) -> None:
    mount.sh("mkdir partition=3 && echo p3 >> partition=3/t && echo p0 >> t")
    mount.sh("echo p0b >> partition=0/t")
    assert mount.out("cat partition=3/t") == "p3\n"
    assert mount.out("cat t") == "p0\np0b\n"
    assert mount.out("ls").split() == ["partition=0", "partition=3", "t"]
    assert mount.out("ls partition=3") == "t\n"
    assert mount.out("getfattr --only-values -n user.walfs.partition partition=3/t") == "3"
    res = mount.sh("mkdir partition=3", check=False)
    assert b"File exists" in res.stderr
    # A stat of both names of partition 0 gives one inode.
    assert os.stat(mount.path / "t").st_ino == os.stat(mount.path / "partition=0/t").st_ino


def test_xattrs_and_ls_stat(mount: Mount) -> None:
    mount.sh("printf 'a\\nbb\\nccc\\n' >> t")
    dump = mount.out("getfattr -d t")
    for line in (
        'user.walfs.org_id="1"',
        'user.walfs.partition="0"',
        'user.walfs.low_watermark="0"',
        'user.walfs.high_watermark="3"',
        'user.walfs.byte_size="9"',
        "user.walfs.topic_hash=",
    ):
        assert line in dump, dump
    owner = mount.out("stat -c '%U %a %F' t").strip()
    assert owner == f"{mount.out('id -un').strip()} 644 regular file"
    assert mount.out("stat -c '%a %F' partition=0").strip() == "755 directory"
    assert mount.out("ls -l t").startswith("-rw-r--r--")


def test_statfs_reports_data_dir(mount: Mount) -> None:
    ours = os.statvfs(mount.path)
    theirs = os.statvfs(mount.data)
    assert ours.f_blocks == theirs.f_blocks and ours.f_frsize == theirs.f_frsize
    assert mount.out("df --output=size . | tail -1").strip()


def test_negative_lookups_then_create(mount: Mount) -> None:
    # Hadoop probes `.name.crc`; a cached negative entry must not hide a later create,
    # nor a topic created under its other name.
    for _ in range(3):
        assert not (mount.path / ".t.crc").exists()
        assert not (mount.path / "t").exists()
    mount.sh("echo x >> partition=0/t")
    assert mount.out("cat t") == "x\n"
    mount.sh("echo y >> .t.crc")
    assert mount.out("cat .t.crc") == "y\n"


def test_thousand_topics(mount: Mount) -> None:
    mount.sh('for i in $(seq 1000); do echo "r$i" >> "topic$i"; done')
    names = mount.out("ls").split()
    assert len(names) == 1001 and "topic1000" in names
    assert mount.out("cat topic1 topic500 topic1000") == "r1\nr500\nr1000\n"
    assert mount.out("cat topic* | wc -l").strip() == "1000"
