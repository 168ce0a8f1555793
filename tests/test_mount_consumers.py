"""Consumer files: .consumers/<group>/<topic> returns what the group has not yet read."""

from __future__ import annotations

import os
import subprocess

from conftest_mount import LineReader, Mount

pytest_plugins = ["conftest_mount"]


def test_cat_consumes_and_commits_at_close(mount: Mount) -> None:
    mount.sh("printf 'a\\nb\\nc\\n' >> t")
    assert mount.sh("cat .consumers/g1/t", check=False).returncode != 0  # no such group yet
    mount.sh("mkdir .consumers/g1 .consumers/g2")  # groups are made with mkdir
    assert mount.out("ls .consumers").split() == ["g1", "g2"]
    assert mount.out("cat .consumers/g1/t") == "a\nb\nc\n"
    assert mount.out("cat .consumers/g1/t") == ""  # all committed at close
    assert mount.out("cat .consumers/g2/t") == "a\nb\nc\n"  # groups are independent
    mount.sh("echo d >> t; echo e >> t")
    assert mount.out("stat -c %s .consumers/g1/t").strip() == "4"
    assert mount.out("cat .consumers/g1/t") == "d\ne\n"
    assert mount.out("getfattr --only-values -n user.walfs.committed_offset .consumers/g1/t") == "5"
    assert mount.out("ls .consumers").split() == ["g1", "g2"]
    assert mount.out("ls .consumers/g1").split() == ["partition=0", "t"]


def test_partial_read_commits_only_whole_records(mount: Mount) -> None:
    mount.sh("printf 'one\\ntwo\\nthree\\n' >> t; mkdir .consumers/g")
    with open(mount.path / ".consumers/g/t", "rb", buffering=0) as f:
        assert f.read(6) == b"one\ntw"  # "two" was not returned whole
    assert mount.out("cat .consumers/g/t") == "two\nthree\n"
    # head reads a buffer but prints one line: what it read is consumed
    # (test_mount_consumer_semantics.py).
    mount.sh("echo four >> t")
    assert mount.out("cat .consumers/g/t") == "four\n"


def test_consumer_partitions_and_refusals(mount: Mount) -> None:
    mount.sh("mkdir partition=1 .consumers/g; echo p1 >> partition=1/t; echo p0 >> t")
    assert mount.out("cat .consumers/g/partition=1/t") == "p1\n"
    assert mount.out("cat .consumers/g/t") == "p0\n"
    assert mount.out("cat .consumers/g/partition=0/t") == ""
    res = mount.sh("echo x >> .consumers/g/t", check=False)
    assert res.returncode != 0
    # 0644: writes are refused (EACCES) but the w bit lets setfattr commit.
    assert mount.out("stat -c %a .consumers/g/t").strip() == "644"


def test_tail_follows_a_consumer_file(mount: Mount) -> None:
    mount.sh("echo old >> t; mkdir .consumers/g")
    tail = subprocess.Popen(
        ["tail", "-n", "+1", "-s", "0.1", "-f", ".consumers/g/t"],
        cwd=mount.path,
        stdout=subprocess.PIPE,
    )
    try:
        lines = LineReader(tail)
        assert lines.readline() == b"old\n"
        for n in range(3):
            mount.sh(f"echo new{n} >> t")
            assert lines.readline() == f"new{n}\n".encode()
    finally:
        tail.terminate()
        tail.wait()
    # tail closed the file: everything it printed is committed.
    assert mount.out("cat .consumers/g/t") == ""


def test_cursors_persist_across_remount(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    m.sh("seq 1 10 >> t; mkdir .consumers/g")
    with open(m.path / ".consumers/g/t", "rb") as f:
        assert f.read().split() == [str(i).encode() for i in range(1, 11)]
    m.sh("seq 11 12 >> t")
    m.stop()
    m.start()
    assert m.out("cat .consumers/g/t") == "11\n12\n"
    # A daemon killed before the reader's close commits nothing: the records come again.
    # (A killed reader commits what it read: the kernel closes its files.)
    m.sh("seq 13 14 >> t")
    fd = os.open(m.path / ".consumers/g/t", os.O_RDONLY)
    assert os.read(fd, 100) == b"13\n14\n"
    m.kill()
    try:
        os.close(fd)
    except OSError:
        pass  # the file system is gone: close reports the dead connection
    m.start()
    assert m.out("cat .consumers/g/t") == "13\n14\n"
    m.stop()
