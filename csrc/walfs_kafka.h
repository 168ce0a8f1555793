/*
 * walfs_kafka.h: Kafka record batches (magic v2) in C (csrc/kafka_batch.c, the layout at its
 * top): encoding stored records into a fetch's batch, straight from the mapped segments or
 * from a read's buffers, and a produce batch's records section into walfs record bodies.
 * No state of their own; errors as walfs.h says. walfs/wire/batch_codec.py binds them.
 */
#ifndef WALFS_KAFKA_H
#define WALFS_KAFKA_H

#include "walfs.h"

/* Bytes of a v2 batch's header, before its first record (walfs/wire/record_batch.py's
 * BATCH_OVERHEAD, checked equal by tests/test_kafka_batch_codec.py). */
enum { WALFS_KAFKA_BATCH_HEAD = 61 };

/* Kafka wire: encodes n records as walfs_read_offset returned them (bodies in buf,
 * descriptors in recs, contiguous offsets) as one uncompressed Kafka record batch (magic
 * v2), into a buffer it allocates: *out (release it with walfs_free), the returned length
 * long. Key, headers and producer timestamp come from each record's meta section
 * (walfs/records.py, v1); the append time stands in for a missing producer timestamp.
 * -EBADMSG when a meta section does not parse; -ENOBUFS past Kafka's 2 GiB batch;
 * -ENOMEM. Layout at the top of kafka_batch.c. */
int64_t walfs_kafka_batch(const uint8_t *buf, const walfs_rec_t *recs, uint32_t n, uint8_t **out);
/* As walfs_kafka_batch, for a writer (the Spark sink through a daemon): n records whose
 * bodies (meta || value) lie back to back in the concatenation of n_pieces buffers, as
 * walfs_append_pieces takes them (a body that spans pieces is copied, joined; the others
 * are encoded from the pieces), with offsets 0..n-1 and timestamp_ms standing in for a
 * missing producer timestamp, as walfs_kafka_batch allocates and returns it. -EINVAL
 * unless the pieces hold exactly the bodies' bytes; otherwise as walfs_kafka_batch. */
int64_t walfs_kafka_batch_pieces(uint32_t n, uint32_t n_pieces, const uint8_t *const *pieces,
                                 const uint64_t *piece_lens, const uint32_t *meta_lens, const uint32_t *value_lens,
                                 int64_t timestamp_ms, uint8_t **out);
/* Releases what a walfs_* call allocated for its caller (the Kafka batch encoders). */
void walfs_free(void *p);
/* Kafka wire, a fetch in one pass: the records from `offset` on (at least one when any
 * exists, then up to max_records and max_bytes of stored bodies, and as many as out
 * holds) as one Kafka record batch (the layout walfs_kafka_batch writes), encoded straight
 * from the mapped segment, each record's CRC checked before its bytes are used. Returns
 * the batch's length (0 at the end); -ERANGE outside low..next; -ENOBUFS with *needed
 * when the first record does not fit in out; -EBADMSG with *needed = its offset when the
 * first record is damaged (a later damaged one ends the batch before it); -EINVAL with
 * *needed = its offset when the first record's meta section does not parse. */
int64_t walfs_read_kafka_batch(walfs_t *wal, uint32_t stream_no, uint64_t offset, uint32_t max_records,
                               uint64_t max_bytes, uint8_t *out, uint64_t outlen, uint64_t *needed);
/* Kafka wire, the other way: the records section of one (decompressed) v2 batch as walfs
 * records: out receives their bodies (meta || value, as walfs/records.py writes them) back
 * to back, meta_lens/value_lens one entry per record (count of them). base_ts -1 means the
 * producer sent no timestamps. Returns the bytes of out used; -ENOBUFS with *needed when
 * out is too small (nothing is valid then); -EBADMSG for records that do not parse. */
int64_t walfs_kafka_records(const uint8_t *body, uint64_t len, uint32_t count, int64_t base_ts, uint8_t *out,
                            uint64_t outlen, uint32_t *meta_lens, uint32_t *value_lens, uint64_t *needed);

#endif
