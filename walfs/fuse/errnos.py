"""Which errno a walfs error becomes at the file system boundary."""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pyfuse3

from walfs import errors as wal_errors
from walfs.engine.names import MAX_NAME_BYTES, name_error

log = logging.getLogger("walfs.fuse")


def topic_name_error(name: bytes) -> int:
    """0 if `name` may be a topic in the tree, else the errno that explains why not. The
    rule is walfs.engine.names.topic_bytes (the same on every face); this only picks the errno."""
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
    if isinstance(exc, wal_errors.CorruptRecordError):
        # EIO; the engine logs each damaged record once (not at every READ the kernel retries).
        log.debug("%s failed: %s", what, exc)
        return err
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
