"""walfs: a write-ahead log you use through plain files.

import walfs
with walfs.Wal("/var/lib/walfs") as wal:
    wal.append("orders", b"order 42 paid")
"""

from walfs.consumer import Consumer
from walfs.engine.contract import LogEngine
from walfs.engine.records import Record
from walfs.engine.types import Change
from walfs.errors import (
    BufferTooSmallError,
    CorruptRecordError,
    InvalidPartitionError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    RecordTooLargeError,
    WalClosedError,
    WalCorruptError,
    WalError,
    WalFailedError,
    WalIOError,
    WalLockedError,
)
from walfs.open import open_engine
from walfs.wal import StreamInfo, Wal

__all__ = [
    "BufferTooSmallError",
    "Change",
    "Consumer",
    "CorruptRecordError",
    "InvalidPartitionError",
    "InvalidTopicError",
    "LogEngine",
    "OffsetOutOfRangeError",
    "open_engine",
    "ReadOnlyError",
    "Record",
    "RecordTooLargeError",
    "StreamInfo",
    "Wal",
    "WalClosedError",
    "WalCorruptError",
    "WalError",
    "WalFailedError",
    "WalIOError",
    "WalLockedError",
]
