"""The row layout of format("walfs"), in Spark's and in Arrow's terms.

The first seven columns are those of Spark's Kafka source, in its order, so that code
written for Kafka rows runs unchanged; walfs adds `headers` (always present, empty for
file-appended records) and `gid`, the WAL-wide sequence number of the record (it orders
records across the partitions of one data directory).

timestampType follows Kafka: 0 (CreateTime) when a producer gave the timestamp (Kafka
listener, append(..., timestamp_ms=)), 1 (LogAppendTime) when walfs stamped it on append.
"""

from __future__ import annotations

import pyarrow as pa

CREATE_TIME = 0
LOG_APPEND_TIME = 1

SPARK_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>, gid long"
)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        # Spark's TimestampType is microseconds since the epoch, in UTC.
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(HEADER_TYPE)),
        pa.field("gid", pa.int64()),
    ]
)
