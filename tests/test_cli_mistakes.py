"""The mistakes a person makes with the `walfs` command (issue 33, item 5), each run as a
real `walfs` process from the venv: no traceback ever, one line `walfs VERB: ...` that
names the file, address or flag, exit 1 for a failure and 2 for a wrong command line
(walfs/cli/common.py). Mounts are real, in tmp dirs; a busy port is a socket bound first.
Also fsck's progress line: on a terminal (a pty) it shows, in a pipe it does not."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pty
import select
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from catalog_files import to_legacy
from conftest_mount import Mount, is_mounted

from walfs.cli import VERBS
from walfs.open import open_engine

pytest_plugins = ["conftest_mount"]

WALFS = str(Path(sys.executable).parent / "walfs")
SMALL = {"segment_size": 16 << 20, "block_size": 1 << 20}


def walfs(
    *args: str, rc: int, says: tuple[str, ...] = (), timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Runs `walfs ARGS`; asserts its exit code, no traceback, and that stderr says each
    of `says`."""
    res = subprocess.run([WALFS, *args], capture_output=True, text=True, timeout=timeout)
    both = res.stdout + res.stderr
    assert "Traceback" not in both, both
    assert res.returncode == rc, f"exit {res.returncode}, expected {rc}: {both}"
    if rc != 0:
        # The verb's own lines (a daemon's log lines may come before them).
        verb = f" {args[0]}" if args[0] in VERBS else ""
        own = "\n".join(line for line in res.stderr.splitlines() if line.startswith(f"walfs{verb}:"))
        assert own, f"no 'walfs{verb}:' line in {res.stderr!r}"
        for text in says:
            assert text in own, f"{text!r} not in {own!r}"
    return res


def make_data_dir(path: Path, records: int = 3) -> Path:
    w = open_engine(str(path), **SMALL)
    try:
        w.create("t")
        if records:
            w.append_lines("t", 0, b"".join(b"line %d\n" % i for i in range(records)))
    finally:
        w.close()
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return make_data_dir(tmp_path / "data")


@pytest.fixture
def busy_port() -> Iterator[int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


# -- paths that are not what the verb needs ---------------------------------------------------
def test_info_on_a_missing_path_a_file_and_a_plain_directory(tmp_path: Path, data: Path) -> None:
    walfs("info", str(tmp_path / "nonexistent"), rc=1, says=(str(tmp_path / "nonexistent"), "no such file"))
    f = tmp_path / "notes.txt"
    f.write_text("x")
    walfs("info", str(f), rc=1, says=(str(f), "is a file, not a data directory"))
    empty = tmp_path / "empty"
    empty.mkdir()
    walfs("info", str(empty), rc=1, says=(str(empty), "not a walfs data directory"))
    assert os.listdir(empty) == []  # nothing was made there
    walfs("trim", str(empty), "t", "1", rc=1, says=(str(empty), "not a walfs data directory"))
    assert os.listdir(empty) == []
    walfs("fsck", str(empty), rc=2, says=(str(empty), "not a walfs data directory"))
    walfs("mount", str(f), str(empty), rc=1, says=(str(f), "is a file"))
    walfs("serve", str(f), rc=1, says=(str(f), "is a file"))


def test_info_on_a_data_directory_human_and_json(data: Path) -> None:
    res = walfs("info", str(data), rc=0)
    lines = res.stdout.splitlines()
    assert lines[0].startswith(f"{data}: walfs data directory")
    assert lines[1].startswith("disk: ")
    assert lines[2].split() == ["TOPIC", "PARTITION", "LOW", "HIGH", "RECORDS", "BYTES"]
    assert lines[3].split() == ["t", "0", "0", "3", "3", str(len(b"line 0\nline 1\nline 2\n"))]
    res = walfs("info", str(data), "--json", rc=0)
    assert [json.loads(line) for line in res.stdout.splitlines()] == [
        {"topic": "t", "partition": 0, "low": 0, "high": 3, "bytes": 21}
    ]


def test_trim_past_the_end_and_bad_offsets(data: Path) -> None:
    past = ("offset 100 is past the end of 't'[0]", "high watermark 3")
    walfs("trim", str(data), "t", "100", rc=1, says=past)
    walfs("trim", str(data), "nope", "1", rc=1, says=(str(data), "no topic 'nope'"))
    walfs("trim", str(data), "t", "-1", rc=2, says=("offset",))
    walfs("trim", str(data), "t", "x", rc=2, says=("offset", "'x'"))
    walfs("retention", str(data), "t", "--ms", "1Q", rc=2, says=("--ms", "'1Q'"))
    walfs("trim", str(data), "t", "2", rc=0)
    assert json.loads(walfs("info", str(data), "--json", rc=0).stdout)["low"] == 2


# -- the command line itself -----------------------------------------------------------------
def test_version_and_unknown_verbs_and_options() -> None:
    for flag in ("--version", "-V"):
        res = walfs(flag, rc=0)
        assert res.stdout == f"walfs {version('walfs')}\n"
    walfs("frob", rc=2, says=("unknown verb 'frob'",))
    walfs("--frob", rc=2, says=("unknown option '--frob'",))
    res = walfs("info", "--frob", "x", rc=2, says=("walfs info: unrecognized arguments: --frob",))
    assert res.stderr.splitlines()[1] == "Try 'walfs info --help' for more information."


def test_bad_sizes_and_modes_name_the_flag(tmp_path: Path) -> None:
    mp = tmp_path / "mnt"
    mp.mkdir()
    d = str(tmp_path / "d")
    res = walfs("mount", d, str(mp), "--segment-size", "1Q", rc=2, says=("--segment-size", "'1Q' is not a"))
    assert "parse_size" not in res.stderr
    walfs("mount", d, str(mp), "-o", "block_size=1Q", rc=2, says=("--block-size (-o block_size=)", "'1Q'"))
    walfs("mount", d, str(mp), "--umask", "9", rc=2, says=("--umask", "'9' is not an octal mode"))
    walfs("mount", d, str(mp), "-o", "frob", rc=2, says=("unknown option 'frob'",))
    walfs("mount", d, str(mp), "-o", "org_id=x", rc=2, says=("--org-id (-o org_id=)",))
    walfs("mount", d, str(mp), "--log-level", "loud", rc=2, says=("--log-level", "'loud'"))
    walfs("serve", d, "--block-size", "1Q", rc=2, says=("--block-size", "'1Q' is not a size"))
    assert not is_mounted(mp) and not os.path.exists(d)


def test_every_option_of_every_verb_has_help() -> None:
    class Caught(Exception):
        pass

    def parsers_of(verb: str) -> list[argparse.ArgumentParser]:
        seen: list[argparse.ArgumentParser] = []
        original = argparse.ArgumentParser.parse_args

        def capture(self: argparse.ArgumentParser, *a: object, **k: object) -> object:
            seen.append(self)
            raise Caught

        argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign,assignment]
        try:
            importlib.import_module(VERBS[verb][0]).main(["--help"])
        except Caught:
            pass
        finally:
            argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
        assert seen, f"walfs {verb} parses no arguments with argparse"
        out = list(seen)
        for p in seen:  # subcommands (kafka-user add/remove/list)
            for action in p._actions:
                if isinstance(action, argparse._SubParsersAction):
                    out += list(action.choices.values())
        return out

    missing = []
    for verb in VERBS:
        for p in parsers_of(verb):
            for action in p._actions:
                if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                    continue
                if action.help is None:
                    missing.append(f"{p.prog} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_an_unexpected_error_is_one_line_unless_debug(tmp_path: Path) -> None:
    # A bug (here: a verb that raises what no user can cause) says so in one line; --debug
    # and WALFS_DEBUG=1 show its traceback.
    script = (
        "import sys; from walfs.cli.common import run_verb\n"
        "def main(argv): raise KeyError('boom')\n"
        "sys.exit(run_verb('demo', main, []))\n"
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("walfs demo: internal error: KeyError: 'boom'") and "--debug" in res.stderr
    env = {**os.environ, "WALFS_DEBUG": "1"}
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1 and "Traceback" in res.stderr and "KeyError: 'boom'" in res.stderr


# -- the mount ---------------------------------------------------------------------------------
def test_a_non_empty_mount_point_is_refused_unless_nonempty(make_mount) -> None:
    m: Mount = make_mount()
    (m.path / "orders").write_text("written while nothing was mounted\n")
    args = ("mount", str(m.data), str(m.path), "--segment-size", "16M", "--block-size", "1M")
    walfs(*args, rc=1, says=(str(m.path), "is not empty", "'orders'", "--nonempty"))
    assert not is_mounted(m.path)
    walfs(*args, "-o", "nonempty", "--log-file", str(m.log), rc=0)
    m.pid = int(os.getxattr(m.path, "user.walfs.pid"))
    assert not (m.path / "orders").exists()  # hidden by the mount, as asked
    m.stop()
    assert (m.path / "orders").read_text() == "written while nothing was mounted\n"


def test_busy_ports_name_the_listener_and_address(make_mount, busy_port: int) -> None:
    m: Mount = make_mount()
    addr = f"127.0.0.1:{busy_port}"
    base = ("mount", str(m.data), str(m.path), "--segment-size", "16M", "--block-size", "1M")
    for flag in ("--kafka-listen", "--metrics-listen"):
        res = walfs(*base, flag, addr, rc=1, says=(f"{flag} {addr}: cannot listen", "Address already in use"))
        assert "Trio nursery" not in res.stderr
        assert not is_mounted(m.path)
    walfs("serve", str(m.data), "--kafka-listen", addr, rc=1, says=(f"--kafka-listen {addr}: cannot listen",))
    walfs(
        "serve", str(m.data), "--kafka-listen", "127.0.0.1:0", "--metrics-listen", addr,
        rc=1, says=(f"--metrics-listen {addr}: cannot listen",),
    )


def test_an_insecure_listen_names_the_flag_of_the_verb_used(make_mount) -> None:
    m: Mount = make_mount()
    res = walfs(
        "mount", str(m.data), str(m.path), "--kafka-listen", "0.0.0.0:0",
        rc=2, says=("--kafka-insecure-listen", "--kafka-auth-config"),
    )
    assert " --insecure-listen" not in res.stderr and " --auth-config" not in res.stderr
    says = ("--insecure-listen", "--auth-config ")
    walfs("serve", str(m.data), "--kafka-listen", "0.0.0.0:0", rc=2, says=says)


def test_verbs_on_a_mount_and_on_its_mounted_data_directory(mount: Mount) -> None:
    mount.sh("seq 1 5 >> t; mkdir partition=2; seq 1 3 >> partition=2/t; echo x >> .dotted")
    data, mp = str(mount.data), str(mount.path)
    res = walfs("info", mp, rc=0)
    assert res.stdout.startswith(f"{mp}: walfs mount of {data} (org 1, daemon pid {mount.pid})")
    assert [r.split()[:5] for r in res.stdout.splitlines()[3:6]] == [
        [".dotted", "0", "0", "1", "1"],
        ["t", "0", "0", "5", "5"],
        ["t", "2", "0", "3", "3"],
    ]
    title = walfs("info", data, rc=0).stdout.splitlines()[0]
    assert title == f"{data}: walfs data directory (org 1, mounted on {mp})"
    as_json = [json.loads(x) for x in walfs("info", mp, "--json", rc=0).stdout.splitlines()]
    assert as_json == [json.loads(x) for x in walfs("info", data, "--json", rc=0).stdout.splitlines()]
    # The data directory of a mount: retention and trim go through the mount's daemon.
    res = walfs("retention", data, "t", "--ms", "60000", rc=0)
    assert res.stdout.split() == ["retention_ms=60000", "retention_bytes=-1"]
    assert os.getxattr(mount.path / "t", "user.walfs.retention_ms") == b"60000"
    walfs("trim", data, "t", "100", rc=1, says=("offset 100 is past the end of 't'[0] (high watermark 5)",))
    walfs("trim", mp, "t", "100", rc=1, says=("offset 100 is past the end of 't'[0] (high watermark 5)",))
    walfs("trim", data, "t", "2", rc=0)
    assert os.getxattr(mount.path / "t", "user.walfs.low_watermark") == b"2"
    walfs("trim", mp, "nope", "1", rc=1, says=(f"{mp}: no topic 'nope'",))
    # A topic's file alone, as `truncate` takes a file: its topic and partition are its own.
    walfs("trim", f"{mp}/t", "3", rc=0)
    assert os.getxattr(mount.path / "t", "user.walfs.low_watermark") == b"3"
    walfs("trim", f"{mp}/partition=2/t", "1", rc=0)
    assert os.getxattr(mount.path / "partition=2" / "t", "user.walfs.low_watermark") == b"1"
    assert os.getxattr(mount.path / "t", "user.walfs.low_watermark") == b"3"
    past = ("offset 9 is past the end of 't'[2] (high watermark 3)",)
    walfs("trim", f"{mp}/partition=2/t", "9", rc=1, says=past)
    walfs("trim", f"{mp}/partition=2/t", "1", "--partition", "3", rc=1, says=("partition 2's file",))
    walfs("trim", f"{mp}/nope", "1", rc=1, says=(f"{mp}/nope: no such file or directory",))
    walfs("trim", data + "/streams.cat", "1", rc=1, says=("is not a topic's file on a walfs mount",))
    walfs("trim", f"{mp}/t", "x", rc=2, says=("offset", "'x'"))
    walfs("trim", mp, rc=2, says=("PATH TOPIC OFFSET",))
    assert "clean" in walfs("fsck", mp, rc=0).stdout
    walfs("info", data, "--org-id", "2", rc=0)  # read-only: any org of the directory
    walfs("info", mp, "--org-id", "2", rc=1, says=("shows org 1, not 2",))
    other = mount.path.parent / "other-mnt"
    other.mkdir()
    walfs("mount", data, str(other), rc=1, says=(f"{data} is already mounted on {mp}", f"walfs umount {mp}"))
    assert not is_mounted(other)
    walfs("mount", data + "-new", str(other), "--log-file", "/nonexistent/x.log", rc=1,
          says=("--log-file /nonexistent/x.log: No such file or directory",))
    assert not is_mounted(other)


def test_a_dead_mount_says_how_to_clear_it(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    m.kill()
    walfs("info", str(m.path), rc=1, says=(str(m.path), f"walfs umount {m.path}"))


def test_a_mount_refused_for_damage_names_fsck_and_repair(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path / "data", records=50)
    to_legacy(str(data), 2)  # a version 3 catalog would rebuild the header (test_metadata_heal_catalog.py)
    seg = next(p for p in data.iterdir() if p.suffix == ".wal")
    with open(seg, "r+b") as f:  # a byte of the segment header: recovery refuses to guess
        f.seek(41)
        b = f.read(1)[0]
        f.seek(41)
        f.write(bytes([b ^ 0x10]))
    mp = tmp_path / "mnt"
    mp.mkdir()
    hint = (f"walfs fsck {data}", f"walfs fsck --repair {data} --into NEW_DIR")
    for extra in ((), ("--foreground",)):
        walfs("mount", str(data), str(mp), *extra, rc=1, says=hint)
        assert not is_mounted(mp)
    walfs("serve", str(data), "--kafka-listen", "127.0.0.1:0", rc=1, says=hint)
    walfs("info", str(data), rc=1, says=hint)
    walfs("fsck", str(data), rc=2, says=("--repair",))


# -- fsck progress -------------------------------------------------------------------------------
def _fsck_on_pty(data: Path) -> tuple[int, str, bytes]:
    """fsck with stderr on a terminal: (exit code, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([WALFS, "fsck", str(data)], stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        assert ready, "fsck wrote nothing for 60 s"
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child side closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out, seen


def test_fsck_shows_progress_on_a_terminal_and_not_in_a_pipe(tmp_path: Path) -> None:
    data = tmp_path / "big"
    w = open_engine(str(data), **SMALL)
    try:
        for topic in ("a", "b", "c"):
            w.append_lines(topic, 0, b"".join(b"%d\n" % i for i in range(100_000)))
    finally:
        w.close()
    code, out, tty = _fsck_on_pty(data)
    assert code == 0 and out.rstrip().endswith("clean"), (out, tty)
    assert b"Traceback" not in tty
    text = tty.decode()
    assert "fsck: 3/3 streams, 300,000 records" in text and "checked" in text, text
    assert text.endswith("\r\x1b[K")  # the progress line is cleared before the report
    piped = subprocess.run([WALFS, "fsck", str(data)], capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == "" and piped.stdout.rstrip().endswith("clean")
