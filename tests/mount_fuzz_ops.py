"""The mount fuzzer's worker (tests/test_mount_fuzz.py runs it as root and, through
setpriv, as uid 65534): random system calls on a walfs mount, with random flags, offsets,
names (odd bytes included) and xattrs. Standard library only, so that any user's python3
can run it.

    python3 mount_fuzz_ops.py MOUNTPOINT SEED OPS EXCLUDED_TOPIC [--each]

With --each, after every refused call (an OSError) it compares the mount's state with the
state before the call (without it, the caller compares the state before and after the
run, for a user who may change nothing at all): topics, partitions, groups, every high and
low watermark, retention setting and committed offset, except those of EXCLUDED_TOPIC
(another process appends there meanwhile). A refused call that changed the state is a
violation. The last line of stdout is a JSON report: {"ops", "outcomes": {op: {"ok"|errno
name: count}}, "violations": [...], "state": the final state}."""

from __future__ import annotations

import errno
import json
import os
import random
import sys
from typing import Any

XATTR_STATE = ("high_watermark", "low_watermark", "retention_ms", "retention_bytes")
NAMES = [
    b"a", b"b", b"c", b"new", b"topic.with.dots", b"-dash", b"sp ace", b"nl\nname", b"\xff\xfe",
    b"emoji\xf0\x9f\x98\x80", b"x" * 249, b"y" * 300, b".consumers", b"partition=0", b"partition=1",
    b"partition=7", b"partition=x", b"partition=-1", b".", b"..", b"g", b"g2", b"h",
]  # fmt: skip
XATTR_NAMES = [
    b"user.walfs.low_watermark", b"user.walfs.high_watermark", b"user.walfs.retention_ms",
    b"user.walfs.retention_bytes", b"user.walfs.committed_offset", b"user.walfs.nope", b"user.other",
    b"trusted.x", b"security.selinux", b"user.walfs.", b"user." + b"z" * 250,
]  # fmt: skip
EXISTING = [b"a", b"a", b"b", b"bg", b"g"]  # what the test makes before the run
FLAGS = [
    os.O_APPEND,
    os.O_CREAT,
    os.O_TRUNC,
    os.O_EXCL,
    os.O_NONBLOCK,
    os.O_DIRECTORY,
    os.O_SYNC,
    os.O_NOFOLLOW,
]


class Fuzzer:
    def __init__(self, mnt: bytes, seed: int, excluded: bytes, each: bool) -> None:
        self.mnt = mnt
        self.each = each
        self.rng = random.Random(seed)
        self.excluded = excluded
        self.fds: list[int] = []
        self.outcomes: dict[str, dict[str, int]] = {}
        self.violations: list[dict[str, Any]] = []

    # -- the state a refused call must not change -------------------------------------
    def _xattrs(self, path: bytes, names: tuple[str, ...]) -> dict[str, str]:
        out = {}
        for n in names:
            try:
                out[n] = os.getxattr(path, f"user.walfs.{n}").decode()
            except OSError as e:
                out[n] = errno.errorcode.get(e.errno or 0, str(e.errno))
        return out

    def state(self) -> dict[str, Any]:
        st: dict[str, Any] = {}
        dirs = [b""] + sorted(n + b"/" for n in os.listdir(self.mnt) if n.startswith(b"partition="))
        for d in dirs:
            for name in sorted(os.listdir(self.mnt + b"/" + d) if d else os.listdir(self.mnt)):
                if name == self.excluded or name.startswith(b"partition=") or name == b".consumers":
                    continue
                st[(d + name).decode(errors="replace")] = self._xattrs(
                    self.mnt + b"/" + d + name, XATTR_STATE
                )
        groups = sorted(os.listdir(self.mnt + b"/.consumers"))
        st[".consumers"] = [g.decode(errors="replace") for g in groups]
        for g in groups:
            gdir = self.mnt + b"/.consumers/" + g
            for t in sorted(os.listdir(gdir)):
                if t != self.excluded:
                    key = f".consumers/{g.decode(errors='replace')}/{t.decode(errors='replace')}"
                    st[key] = self._xattrs(gdir + b"/" + t, ("committed_offset",))
        return st

    # -- random inputs ----------------------------------------------------------------
    def name(self) -> bytes:
        r = self.rng.random()
        if r < 0.5:
            return self.rng.choice(EXISTING)
        if r < 0.75:
            return self.rng.choice(NAMES[:12] + NAMES[20:])
        if r < 0.9:
            return self.rng.choice(NAMES)
        return bytes(self.rng.randrange(1, 256) for _ in range(self.rng.randrange(1, 12))).replace(b"/", b"_")

    def path(self) -> bytes:
        r = self.rng.random()
        if r < 0.2:
            rel = self.rng.choice(EXISTING)
        elif r < 0.45:
            rel = self.name()
        elif r < 0.6:
            rel = b"partition=" + self.rng.choice([b"0", b"1", b"7"]) + b"/" + self.name()
        elif r < 0.7:
            rel = b".consumers/" + self.name()
        elif r < 0.9:
            rel = b".consumers/" + self.rng.choice([b"g", b"g", b"g2", b"zz"]) + b"/" + self.name()
        else:
            rel = self.name() + b"/" + self.name()
        return self.mnt + b"/" + rel

    def data(self) -> bytes:
        r = self.rng.random()
        if r < 0.5:
            body = self.rng.randbytes(self.rng.randrange(0, 200)).replace(b"\n", b"")
            return body + (b"\n" if self.rng.random() < 0.7 else b"")
        if r < 0.8:
            return b"".join(
                b"line %d\n" % self.rng.randrange(10**6) for _ in range(self.rng.randrange(1, 50))
            )
        if r < 0.95:
            return self.rng.randbytes(self.rng.randrange(1, 8192))
        return b"z" * (self.rng.randrange(1, 3) << 20)  # past a 1 MiB line limit: EFBIG

    def xattr_value(self, name: bytes) -> bytes:
        junk = [b"-5", b"", b"abc", b"1e3", b"9" * 30, b"\xff", b"0x10", b"1.5", b"\x00"]
        if b"retention" in name:
            # Only limits that keep these fresh records: a retention that trims would act
            # later, from the background thread, and blur what a refused call changed.
            valid = [b"-1", b"default", b"86400000000", b"1099511627776", b" 86400000000"]
        else:
            valid = [b"0", b"1", b"2", b"3", b"5", b"100", b" 3", b"3\n"]
        return self.rng.choice(valid + junk)

    # -- one operation ----------------------------------------------------------------
    def op(self) -> tuple[str, Any]:
        rng = self.rng
        kinds = ["open", "open", "open", "write", "write", "write", "pread", "read", "close", "close",
                 "ftruncate", "fsync", "lseek", "truncate", "setxattr", "setxattr", "getxattr", "listxattr",
                 "removexattr", "mkdir", "mkdir", "rmdir", "rename", "unlink", "link", "symlink", "chmod",
                 "utime", "stat", "listdir", "mknod", "chown"]  # fmt: skip
        kind = rng.choice(kinds)
        fd = rng.choice(self.fds) if self.fds else None
        if kind in ("write", "pread", "read", "close", "ftruncate", "fsync", "lseek") and fd is None:
            kind = "open"
        if kind == "open":
            acc = rng.choice([os.O_RDONLY, os.O_WRONLY, os.O_RDWR])
            flags = acc
            for f in FLAGS:
                if rng.random() < (0.4 if f in (os.O_APPEND, os.O_CREAT) else 0.1):
                    flags |= f
            path = self.path()
            return kind, lambda: self.fds.append(os.open(path, flags, rng.choice([0o644, 0o600, 0o777])))
        if kind == "write":
            data = self.data()
            return kind, lambda: os.write(fd, data)
        if kind == "pread":
            size, off = rng.randrange(0, 1 << 17), rng.choice([0, 1, rng.randrange(1 << 20), 2**62])
            return kind, lambda: os.pread(fd, size, off)
        if kind == "read":
            return kind, lambda: os.read(fd, rng.randrange(0, 1 << 16))
        if kind == "close":
            self.fds.remove(fd)
            return kind, lambda: os.close(fd)
        if kind == "ftruncate":
            return kind, lambda: os.ftruncate(fd, rng.choice([0, 1, 10**6]))
        if kind == "fsync":
            return kind, lambda: os.fsync(fd)
        if kind == "lseek":
            return kind, lambda: os.lseek(fd, rng.randrange(-5, 1 << 20), rng.choice([0, 1, 2]))
        p, p2 = self.path(), self.path()
        if kind == "truncate":
            return kind, lambda: os.truncate(p, rng.choice([0, 3, 10**6]))
        if kind == "setxattr":
            # Mostly the settable ones on existing topics, so that some succeed.
            name = rng.choice(XATTR_NAMES[:4] if rng.random() < 0.6 else XATTR_NAMES)
            if rng.random() < 0.6:
                p = self.mnt + b"/" + rng.choice([b"a", b"b", b"partition=1/a", b".consumers/g/a"])
            elif p in (self.mnt + b"/" + self.excluded, self.mnt + b"/partition=0/" + self.excluded):
                # A trim of the background writer's topic (under either of its names) would
                # take the records the test checks for at the end; every other call may
                # still reach that topic.
                p = self.mnt + b"/a"
            value = self.xattr_value(name)
            return kind, lambda: os.setxattr(
                p, name, value, rng.choice([0, os.XATTR_CREATE, os.XATTR_REPLACE])
            )
        if kind == "getxattr":
            return kind, lambda: os.getxattr(p, rng.choice(XATTR_NAMES))
        if kind == "listxattr":
            return kind, lambda: os.listxattr(p)
        if kind == "removexattr":
            return kind, lambda: os.removexattr(p, rng.choice(XATTR_NAMES))
        if kind == "mkdir":
            return kind, lambda: os.mkdir(p, 0o755)
        if kind == "rmdir":
            return kind, lambda: os.rmdir(p)
        if kind == "rename":
            return kind, lambda: os.rename(p, p2)
        if kind == "unlink":
            return kind, lambda: os.unlink(p)
        if kind == "link":
            return kind, lambda: os.link(p, p2)
        if kind == "symlink":
            return kind, lambda: os.symlink(b"target", p)
        if kind == "chmod":
            return kind, lambda: os.chmod(p, rng.choice([0o777, 0o600, 0o4755]))
        if kind == "chown":
            return kind, lambda: os.chown(p, rng.choice([0, 65534, -1]), rng.choice([0, 65534, -1]))
        if kind == "utime":
            return kind, lambda: os.utime(p, (1, 2))
        if kind == "stat":
            return kind, lambda: os.stat(p)
        if kind == "listdir":
            return kind, lambda: os.listdir(p)
        return kind, lambda: os.mknod(p, 0o644)

    def run(self, n: int) -> None:
        before = self.state() if self.each else {}
        for _ in range(n):
            kind, call = self.op()
            try:
                call()
            except OSError as e:
                outcome = errno.errorcode.get(e.errno or 0, str(e.errno))
                after = self.state() if self.each else before
                if after != before:
                    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                    self.violations.append({"op": kind, "errno": outcome, "changed": {
                        k: [before.get(k), after.get(k)] for k in changed}})  # fmt: skip
                    before = after
            except ValueError as e:  # embedded NUL and the like: refused by Python itself
                outcome = f"ValueError: {e}"
            else:
                outcome = "ok"
                if self.each and kind not in ("pread", "read", "getxattr", "listxattr", "stat", "listdir"):
                    before = self.state()
            counts = self.outcomes.setdefault(kind, {})
            counts[outcome] = counts.get(outcome, 0) + 1
        for fd in self.fds:
            try:
                os.close(fd)
            except OSError:
                pass


def main() -> None:
    mnt, seed, n, excluded = sys.argv[1].encode(), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].encode()
    os.umask(0o022)
    f = Fuzzer(mnt, seed, excluded, "--each" in sys.argv[5:])
    f.run(n)
    report = {"ops": n, "outcomes": f.outcomes, "violations": f.violations, "state": f.state()}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
