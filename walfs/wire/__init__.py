"""The Kafka record-batch codec, shared by the Kafka face, the Spark source and the cluster
engine: record_batch.py (the v2 layout, parse and build in Python), batch_codec.py (the C
library's fast paths, csrc/walfs_kafka.h) and compression.py (the four codecs, with a cap)."""
