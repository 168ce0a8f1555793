"""Permissions that hold on the mount (issue 11): a second, real user (uid 65534 through
setpriv) reads and writes what the modes allow and nothing else; groups are made with
mkdir; only users with write permission on the group directories move a cursor."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_mount import Mount

pytest_plugins = ["conftest_mount"]

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def as_nobody(m: Mount, script: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*NOBODY, "bash", "-c", script], cwd=m.path, capture_output=True, timeout=60, check=False
    )


@pytest.fixture
def shared_base() -> Iterator[Path]:
    # pytest's tmp dirs are 0700 under root: a directory another user can traverse.
    base = Path(tempfile.mkdtemp(prefix="walfs-perm-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def mount_for_others(base: Path, *options: str) -> Mount:
    m = Mount(base)
    m.start("--allow-other", *options)
    return m


def test_another_user_reads_but_cannot_write_create_or_commit(shared_base: Path) -> None:
    m = mount_for_others(shared_base)
    try:
        m.sh("printf 'a\\nb\\n' >> t; mkdir .consumers/g")
        key_cursor = "getfattr --only-values -n user.walfs.committed_offset .consumers/g/t"
        assert m.out(key_cursor) == "0"
        r = as_nobody(m, "cat t")
        assert r.returncode == 0 and r.stdout == b"a\nb\n"
        for script in (
            "echo x >> t",  # write to a topic
            "echo x >> new",  # create a topic
            "mkdir .consumers/h",  # create a group
            "mkdir partition=5",  # create a partition directory
            "setfattr -n user.walfs.low_watermark -v 1 t",  # change state through an xattr
        ):
            r = as_nobody(m, script)
            assert r.returncode != 0, script
        # Reading a consumer file shows the group's backlog but commits nothing.
        r = as_nobody(m, "cat .consumers/g/t")
        assert r.returncode == 0 and r.stdout == b"a\nb\n"
        assert m.out(key_cursor) == "0"
        assert m.out("cat t") == "a\nb\n"
        assert m.out("ls").split() == ["partition=0", "t"]
        assert m.out("ls .consumers").split() == ["g"]
        # The owner commits by reading.
        assert m.out("cat .consumers/g/t") == "a\nb\n"
        assert m.out(key_cursor) == "2"
    finally:
        m.stop()


def test_umask_and_gid_let_a_group_of_users_write_and_commit(shared_base: Path) -> None:
    m = mount_for_others(shared_base, "--gid", "65534", "--umask", "002")
    try:
        m.sh("echo a >> t; mkdir .consumers/g")
        assert m.out("stat -c '%a %g' t .consumers/g").split() == ["664", "65534", "775", "65534"]
        r = as_nobody(m, "echo b >> t && mkdir .consumers/h && cat .consumers/g/t")
        assert r.returncode == 0, r.stderr
        assert r.stdout == b"a\nb\n"
        assert m.out("getfattr --only-values -n user.walfs.committed_offset .consumers/g/t") == "2"
        assert m.out("ls .consumers").split() == ["g", "h"]
    finally:
        m.stop()


def test_lookups_create_no_group(shared_base: Path) -> None:
    m = mount_for_others(shared_base)
    try:
        m.sh("echo a >> t")
        for name in ("x", "y", "z"):
            assert m.sh(f"cat .consumers/{name}/t", check=False).returncode != 0
        assert m.out("ls .consumers") == ""
        assert not os.path.exists(m.data / "cursors" / "x")
    finally:
        m.stop()
