"""Which errno a walfs error becomes at the file system boundary, and the guard that keeps
any other exception from ending the mount."""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pyfuse3

from walfs import errors as wal_errors
from walfs.names import MAX_NAME_BYTES, name_error

log = logging.getLogger("walfs.fuse")


def topic_name_error(name: bytes) -> int:
    """0 if `name` may be a topic in the tree, else the errno that explains why not. The
    rule is walfs.names.topic_bytes (the same on every face); this only picks the errno."""
    if len(name) > MAX_NAME_BYTES:
        return errno.ENAMETOOLONG
    try:
        text = name.decode("utf-8")
    except UnicodeDecodeError:
        return errno.EINVAL
    return 0 if name_error(text) is None else errno.EINVAL


def fuse_error_for(exc: BaseException) -> pyfuse3.FUSEError:
    """The errno a walfs error becomes at the file system boundary."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc
    if isinstance(exc, wal_errors.WalIOError):
        return pyfuse3.FUSEError(exc.errno or errno.EIO)
    if isinstance(exc, (wal_errors.InvalidTopicError, wal_errors.InvalidPartitionError)):
        return pyfuse3.FUSEError(errno.EINVAL)
    if isinstance(exc, wal_errors.RecordTooLargeError):
        return pyfuse3.FUSEError(errno.EFBIG)
    if isinstance(exc, wal_errors.OffsetOutOfRangeError):
        # Bytes below the low watermark were trimmed: say "no data", not "I/O error".
        return pyfuse3.FUSEError(errno.ENODATA)
    if isinstance(exc, wal_errors.ReadOnlyError):
        return pyfuse3.FUSEError(errno.EROFS)
    if isinstance(exc, OSError) and exc.errno:
        return pyfuse3.FUSEError(exc.errno)
    return pyfuse3.FUSEError(errno.EIO)


def logged_fuse_error(what: str, exc: Exception) -> pyfuse3.FUSEError:
    """fuse_error_for(exc), logged (a warning for a full disk or trimmed data)."""
    err = fuse_error_for(exc)
    if err is not exc:
        level = logging.WARNING if err.errno in (errno.ENOSPC, errno.ENODATA) else logging.ERROR
        log.log(level, "%s failed: %r", what, exc, exc_info=level == logging.ERROR)
    return err


@contextmanager
def wal_errors_as_errno(what: str) -> Iterator[None]:
    try:
        yield
    except pyfuse3.FUSEError:
        raise
    except Exception as exc:
        raise logged_fuse_error(what, exc) from exc


def guard_handlers(cls: type, names: Iterable[str]) -> None:
    """Wraps each request handler of `cls`. pyfuse3 answers FUSEError with its errno, but
    any other exception escapes its worker task, ends pyfuse3.main() and takes the whole
    mount down with the request unanswered. A bug or an unexpected WAL error must cost one
    request (EIO, logged with its traceback), never the mount."""
    for name in names:
        setattr(cls, name, _guard(getattr(cls, name)))


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def guarded(self: Any, *args: Any) -> Any:
        try:
            return await fn(self, *args)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:
            log.exception("%s%r failed", fn.__name__, args[:2])
            raise fuse_error_for(exc) from exc

    return guarded
