"""Engine exceptions -> Kafka error codes."""

from __future__ import annotations

import logging

from walfs.kafka.messages import ErrorCode

log = logging.getLogger("walfs.kafka")

# Matched by class name so that this module does not depend on how walfs.errors
# arranges its hierarchy (and keeps working with any WAL that raises the same names).
_BY_NAME = {
    "InvalidTopicError": ErrorCode.invalid_topic_exception,
    "InvalidPartitionError": ErrorCode.unknown_topic_or_partition,
    "OffsetOutOfRangeError": ErrorCode.offset_out_of_range,
    "RecordTooLargeError": ErrorCode.message_too_large,
    "CorruptRecordError": ErrorCode.corrupt_message,
    "WalFailedError": ErrorCode.kafka_storage_error,
    "WalIOError": ErrorCode.kafka_storage_error,
    "WalCorruptError": ErrorCode.kafka_storage_error,  # damage found (e.g. a cursor file): reported
    "ReadOnlyError": ErrorCode.policy_violation,
}


def error_code_for(exc: BaseException, what: str) -> ErrorCode:
    for cls in type(exc).__mro__:
        code = _BY_NAME.get(cls.__name__)
        if code is not None:
            # A damaged record is logged once by the engine, not at every fetch retrying it.
            level = logging.DEBUG if cls.__name__ == "CorruptRecordError" else logging.INFO
            log.log(level, "%s: %s: %s", what, type(exc).__name__, exc)
            return code
    log.error("%s: unexpected %s: %s", what, type(exc).__name__, exc, exc_info=exc)
    return ErrorCode.unknown_server_error
