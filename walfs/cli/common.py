"""What every `walfs` verb shares: how a mistake or a failure is told (one line, no
traceback), the exit codes, the argument parser, sizes, and what a PATH argument names.

Exit codes, the same for every verb (docs/operations.md, The command line):
  0  done
  1  the command was understood but failed (a missing file, a held directory, a busy
     port, damage, an offset past the end...): the line says what and what to do
  2  the command line is wrong (an unknown verb or option, a bad value, a missing
     argument); `walfs fsck` also exits 2 when it cannot check the directory at all
A bug (an exception nobody expected) prints one line saying so, exit 1; `walfs --debug
VERB ...` or WALFS_DEBUG=1 prints its traceback instead.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from walfs.engine.contract import LogEngine

EXIT_FAILED = 1
EXIT_USAGE = 2
XATTR = "user.walfs."


class CliError(Exception):
    """A failure the command explains in one line (exit 1, or `status`)."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


class UsageError(CliError):
    """The command line is wrong (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


def debug_enabled() -> bool:
    return os.environ.get("WALFS_DEBUG", "") not in ("", "0")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("walfs")
    except PackageNotFoundError:
        return "unknown (not installed)"


# -- telling what went wrong ----------------------------------------------------------------
FSCK_HINT = (
    "check it with `walfs fsck {d}`; `walfs fsck --repair {d} --into NEW_DIR` copies what is intact"
)


def leaf(exc: BaseException) -> BaseException:
    """The one exception inside (nested) exception groups of one member, as trio's
    nurseries deliver a failure; the group itself when it holds several."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def explain(exc: BaseException, data_dir: str | None = None) -> str | None:
    """One line for an exception a user can cause (walfs errors, OS errors); None for one
    that means a bug. Damage names `walfs fsck` and `--repair` for `data_dir`."""
    from walfs.errors import CorruptRecordError, WalCorruptError, WalError, WalIOError, WalLockedError

    exc = leaf(exc)
    if isinstance(exc, BaseExceptionGroup):
        parts = [explain(e, data_dir) for e in exc.exceptions]
        return "; ".join(p for p in parts if p) if all(parts) else None
    if isinstance(exc, CliError):
        return str(exc)
    if isinstance(exc, (WalCorruptError, CorruptRecordError)):
        hint = FSCK_HINT.format(d=data_dir or "DATA_DIR")
        return f"{exc}: the data directory is damaged: {hint}"
    if isinstance(exc, WalLockedError):
        return f"{exc}: a walfs daemon (a mount or `walfs serve`) holds it; `fuser -v DATA_DIR/*` finds it"
    if isinstance(exc, WalIOError):
        return exc.strerror or str(exc)
    if isinstance(exc, WalError):
        return str(exc)
    if isinstance(exc, OSError):
        what = exc.strerror or str(exc)
        if exc.filename is not None:
            return f"{os.fsdecode(exc.filename)}: {what}"
        return what
    return None


def run_verb(verb: str, main: Callable[[list[str]], int], argv: list[str]) -> int:
    """Runs a verb's main: every failure a user can cause becomes `walfs VERB: ...` on
    stderr with exit 1 (2 for usage), never a traceback."""
    import logging

    # Warnings logged while no handler is set up (the core's, in the short verbs; mount and
    # serve set up their own logging) read like the verb's own lines.
    last = logging.StreamHandler(sys.stderr)
    last.setLevel(logging.WARNING)
    last.setFormatter(logging.Formatter(f"walfs {verb}: %(message)s"))
    logging.lastResort = last
    try:
        return int(main(argv))
    except KeyboardInterrupt:
        print(f"\nwalfs {verb}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `walfs info | head`: the reader had enough. Quiet, like coreutils.
        _silence_stdout()
        return EXIT_FAILED
    except SystemExit:
        raise
    except CliError as exc:
        print(f"walfs {verb}: {exc}", file=sys.stderr)
        return exc.status
    except Exception as exc:
        if debug_enabled():
            raise  # --debug: the traceback of any error but the verb's own explanations
        line = explain(exc)
        if line is not None:
            print(f"walfs {verb}: {line}", file=sys.stderr)
            return EXIT_FAILED
        print(
            f"walfs {verb}: internal error: {type(exc).__name__}: {exc}\n"
            f"walfs {verb}: this is a bug; run again with `walfs --debug {verb} ...` (or WALFS_DEBUG=1) "
            "for the traceback and report it",
            file=sys.stderr,
        )
        return EXIT_FAILED


def module_main(verb: str, main: Callable[[list[str]], int]) -> NoReturn:
    """`python -m walfs.cli.VERB ...`: the same as `walfs VERB ...`."""
    sys.exit(run_verb(verb, main, sys.argv[1:]))


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


# -- the argument parser ----------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `walfs VERB: argument --x: ...` and a pointer to
    --help (the usage line is what --help is for), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message}\nTry '{self.prog} --help' for more information.\n")


def octal(text: str) -> int:
    try:
        return int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an octal mode (e.g. 022)") from None


# -- what a PATH argument names ---------------------------------------------------------------
@dataclass
class Target:
    """A PATH given to a verb: a walfs mount point (`mount` set) or a data directory
    (`data_dir` set; a kafka:// URL is one too)."""

    path: str
    mount: str | None = None
    data_dir: str | None = None


def walfs_mounts() -> Iterator[tuple[str, str]]:
    """(mount point, source) of every walfs mount this process sees (/proc/self/mountinfo;
    the source is the data directory the daemon shows as fsname)."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        fields = line.split()
        try:
            sep = fields.index("-")
        except ValueError:
            continue
        if len(fields) > sep + 2 and fields[sep + 1] == "fuse.walfs":
            yield _unescape(fields[4]), _unescape(fields[sep + 2])


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \ooo
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")


def mount_of(data_dir: str) -> str | None:
    """The mount point of a live walfs mount serving `data_dir`, if this process sees one
    (a dead mount, whose daemon is gone, holds no lock and serves nothing)."""
    want = os.path.realpath(data_dir)
    for mountpoint, source in walfs_mounts():
        if source == want or os.path.realpath(source) == want:
            from walfs.service.daemon import is_dead_mount

            if not is_dead_mount(mountpoint):
                return mountpoint
    return None


def resolve(path: str, verb: str) -> Target:
    """Classifies PATH, or says in one line why it is neither a mount point nor a data
    directory."""
    from walfs.engine.targets import is_local

    if not is_local(path):
        return Target(path, data_dir=path)
    try:
        os.getxattr(path, XATTR + "pid")
        return Target(path, mount=path)
    except OSError as exc:
        if exc.errno in (errno.ENOTCONN, errno.ECONNABORTED):
            raise CliError(
                f"{path}: the walfs daemon of this mount is gone (Transport endpoint is not connected): "
                f"`walfs umount {path}` detaches it, then mount it again"
            ) from None
        if exc.errno == errno.ENOENT:
            raise CliError(
                f"{path}: no such file or directory (give a data directory or a walfs mount point)"
            ) from None
        if exc.errno == errno.EACCES:
            raise CliError(f"{path}: permission denied") from None
    if not os.path.isdir(path):
        raise CliError(f"{path} is a file, not a data directory or a walfs mount point")
    return Target(path, data_dir=path)


def not_a_data_dir(path: str) -> CliError:
    return CliError(f"{path} is not a walfs data directory (give a data directory or a walfs mount point)")


def open_read_only(path: str, **options: object) -> LogEngine:
    """A read-only engine on a data directory (it runs beside a live daemon), with the
    failures a user can cause told in one line."""
    from walfs.engine.targets import is_local
    from walfs.errors import CorruptRecordError, WalCorruptError, WalIOError
    from walfs.open import open_engine

    try:
        return open_engine(path, read_only=True, **options)
    except WalIOError as exc:
        if is_local(path) and exc.errno == errno.ENOENT:
            raise not_a_data_dir(path) from None
        raise
    except (WalCorruptError, CorruptRecordError) as exc:
        raise CliError(explain(exc, path) or str(exc)) from None
