"""Exceptions raised by walfs. Every one derives from WalError; where a builtin fits too
(ValueError, IndexError, OSError) the exception is also that builtin."""

import errno
import os


class WalError(Exception):
    """Base of every walfs error."""


class InvalidTopicError(WalError, ValueError):
    """A topic or group name that walfs cannot store."""


class InvalidPartitionError(WalError, ValueError):
    """A partition outside 0..2**31-1."""


class OffsetOutOfRangeError(WalError, IndexError):
    """An offset or byte position outside what the stream holds."""


class RecordTooLargeError(WalError, ValueError):
    """A record that cannot fit in a segment."""


class WalLockedError(WalError):
    """Another process holds the data directory."""


class CorruptRecordError(WalError):
    """A stored record failed its checksum (or its index slot does not match it).
    `offset` names the record; `topic` and `partition` are set by the engine that knows
    the stream's name (None otherwise)."""

    offset: int | None = None
    topic: str | None = None
    partition: int | None = None


class WalCorruptError(WalError):
    """The data directory is damaged in a way recovery does not guess about."""


class WalFailedError(WalError):
    """An fsync failed: the WAL refuses appends until it is reopened."""


class ReadOnlyError(WalError):
    """A write on a WAL opened read_only."""


class WalClosedError(WalError):
    """A call on a closed WAL."""


class BufferTooSmallError(WalError):
    """read_into: the first record does not fit; `needed` is the buffer size it takes."""

    def __init__(self, needed: int) -> None:
        super().__init__(f"the next record needs a {needed}-byte buffer")
        self.needed = needed


class WalIOError(WalError, OSError):
    """An operating-system error such as ENOSPC; the WAL stays usable."""


def corrupt_record(offset: int, stream_no: int) -> CorruptRecordError:
    """The C core's -EBADMSG for record `offset` of stream number `stream_no`."""
    e = CorruptRecordError(f"record at offset {offset} of stream {stream_no} is corrupt")
    e.offset = offset
    return e


def from_errno(rc: int, what: str) -> WalError:
    """Maps a negative errno from the C core to the exception a caller should see."""
    code = -rc
    reason = os.strerror(code)
    # The core's own message often ends with the reason already.
    message = what if what.endswith(reason) else f"{what}: {reason}"
    if code == errno.EAGAIN:
        return WalLockedError(message)
    if code == errno.EBADMSG:
        return CorruptRecordError(message)
    if code == errno.EUCLEAN:
        return WalCorruptError(message)
    if code == errno.EMSGSIZE:
        return RecordTooLargeError(message)
    if code == errno.ERANGE:
        return OffsetOutOfRangeError(message)
    if code == errno.EROFS:
        return ReadOnlyError(message)
    return WalIOError(code, message)
