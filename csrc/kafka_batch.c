/* kafka_batch.c: records as Kafka record batches (magic v2), for the Kafka-wire listener's
 * fetches. Python encoded them at ~5 us a record; here it is a pass over the buffers that
 * walfs_read_offset filled.
 *
 * Input, per record: the meta section the Python layer writes (walfs/records.py, v1,
 * little-endian; empty when there is no key, no header and no producer timestamp):
 *   u8 version=1 | u8 flags (1: key, 2: producer timestamp) | [i64 timestamp_ms]
 *   | [u32 key_len, key] | u32 n_headers | n x (u16 name_len, name, i32 value_len
 *   (-1 = null), value)
 * then the value.
 *
 * Output (big-endian, Apache Kafka's layout):
 *   baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 (-1) | magic i8 (2)
 *   | crc u32 (CRC-32C of all that follows) | attributes i16 (0) | lastOffsetDelta i32
 *   | baseTimestamp i64 | maxTimestamp i64 | producerId i64 (-1) | producerEpoch i16 (-1)
 *   | baseSequence i32 (-1) | recordCount i32 | records
 * record: length varint | attributes i8 (0) | timestampDelta varlong | offsetDelta varint
 *   | key (varint length, -1 = null) | value (same) | header count varint
 *   | headers (name: varint length + bytes, value: varint length or -1)
 * Varints are zigzag. The timestamp is the producer's when the meta holds one, else the
 * append time. */
#include "internal.h"

#include <string.h>

#define BATCH_HEAD 61 /* bytes before the first record */
#define CRC_FROM 21   /* the CRC covers the batch from attributes on */

typedef struct kmeta {
    const uint8_t *key;
    int64_t key_len; /* -1: null */
    int64_t ts;
    const uint8_t *headers; /* n_headers entries in the meta's own layout */
    uint32_t n_headers;
} kmeta_t;

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static size_t varint_size(int64_t v)
{
    uint64_t z = zigzag(v);
    size_t n = 1;
    while (z > 0x7f) {
        z >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, int64_t v)
{
    uint64_t z = zigzag(v);
    while (z > 0x7f) {
        *p++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *p++ = (uint8_t)z;
    return p;
}

static uint8_t *put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

/* Parses a meta section; the header list is checked whole (names, values, bounds). */
static int parse_meta(const uint8_t *m, uint32_t len, int64_t append_ts, kmeta_t *out)
{
    out->key = NULL;
    out->key_len = -1;
    out->ts = append_ts;
    out->headers = NULL;
    out->n_headers = 0;
    if (len == 0) return 0;
    if (len < 6 || m[0] != 1) return -EBADMSG;
    uint8_t flags = m[1];
    uint64_t pos = 2;
    if (flags & 2) {
        if (pos + 8 > len) return -EBADMSG;
        out->ts = (int64_t)le64(m + pos);
        pos += 8;
    }
    if (flags & 1) {
        if (pos + 4 > len) return -EBADMSG;
        uint32_t kl = le32(m + pos);
        pos += 4;
        if (pos + kl > len) return -EBADMSG;
        out->key = m + pos;
        out->key_len = kl;
        pos += kl;
    }
    if (pos + 4 > len) return -EBADMSG;
    out->n_headers = le32(m + pos);
    pos += 4;
    out->headers = m + pos;
    for (uint32_t h = 0; h < out->n_headers; h++) {
        if (pos + 2 > len) return -EBADMSG;
        pos += 2 + (uint64_t)(m[pos] | m[pos + 1] << 8);
        if (pos + 4 > len) return -EBADMSG;
        int32_t vl = (int32_t)le32(m + pos);
        pos += 4;
        if (vl < -1 || (vl > 0 && pos + (uint64_t)vl > len)) return -EBADMSG;
        if (vl > 0) pos += (uint64_t)vl;
    }
    return pos == len ? 0 : -EBADMSG;
}

/* The record's bytes after its length varint; writes them when out is not NULL. */
static size_t put_record(uint8_t *out, const kmeta_t *km, int64_t ts_delta, int64_t off_delta,
                         const uint8_t *value, uint32_t value_len)
{
    size_t n = 1 + varint_size(ts_delta) + varint_size(off_delta);
    n += km->key_len < 0 ? 1 : varint_size(km->key_len) + (size_t)km->key_len;
    n += varint_size(value_len) + value_len + varint_size(km->n_headers);
    const uint8_t *h = km->headers;
    for (uint32_t i = 0; i < km->n_headers; i++) {
        uint32_t nl = (uint32_t)(h[0] | h[1] << 8);
        int32_t vl = (int32_t)le32(h + 2 + nl);
        n += varint_size(nl) + nl + (vl < 0 ? 1 : varint_size(vl) + (size_t)vl);
        h += 2 + nl + 4 + (vl > 0 ? (size_t)vl : 0);
    }
    if (!out) return n;
    uint8_t *p = out;
    *p++ = 0;
    p = put_varint(p, ts_delta);
    p = put_varint(p, off_delta);
    p = put_varint(p, km->key_len);
    if (km->key_len > 0) {
        memcpy(p, km->key, (size_t)km->key_len);
        p += km->key_len;
    }
    p = put_varint(p, value_len);
    memcpy(p, value, value_len);
    p += value_len;
    p = put_varint(p, km->n_headers);
    h = km->headers;
    for (uint32_t i = 0; i < km->n_headers; i++) {
        uint32_t nl = (uint32_t)(h[0] | h[1] << 8);
        int32_t vl = (int32_t)le32(h + 2 + nl);
        p = put_varint(p, nl);
        memcpy(p, h + 2, nl);
        p += nl;
        p = put_varint(p, vl);
        if (vl > 0) memcpy(p, h + 2 + nl + 4, (size_t)vl);
        p += vl > 0 ? vl : 0;
        h += 2 + nl + 4 + (vl > 0 ? (size_t)vl : 0);
    }
    return n;
}

int64_t walfs_kafka_batch(const uint8_t *buf, const walfs_rec_t *recs, uint32_t n, uint8_t *out,
                          uint64_t outlen, uint64_t *needed)
{
    if (n == 0) return 0;
    kmeta_t km;
    int64_t base_ts = 0, max_ts = 0;
    uint64_t total = BATCH_HEAD;
    for (uint32_t i = 0; i < n; i++) { /* sizes, and every meta checked before writing */
        const walfs_rec_t *r = &recs[i];
        if (parse_meta(buf + r->buf_pos, r->meta_len, r->timestamp_ms, &km)) return -EBADMSG;
        if (i == 0) base_ts = max_ts = km.ts;
        if (km.ts > max_ts) max_ts = km.ts;
        size_t len = put_record(NULL, &km, km.ts - base_ts, (int64_t)(r->offset - recs[0].offset), NULL, r->value_len);
        total += varint_size((int64_t)len) + len;
    }
    if (total > outlen || total - 12 > INT32_MAX) {
        if (needed) *needed = total;
        return -ENOBUFS;
    }
    uint8_t *p = out + BATCH_HEAD;
    for (uint32_t i = 0; i < n; i++) {
        const walfs_rec_t *r = &recs[i];
        parse_meta(buf + r->buf_pos, r->meta_len, r->timestamp_ms, &km);
        int64_t ts_delta = km.ts - base_ts, off_delta = (int64_t)(r->offset - recs[0].offset);
        const uint8_t *value = buf + r->buf_pos + r->meta_len;
        size_t len = put_record(NULL, &km, ts_delta, off_delta, value, r->value_len);
        p = put_varint(p, (int64_t)len);
        p += put_record(p, &km, ts_delta, off_delta, value, r->value_len);
    }
    uint8_t *h = out;
    h = put_be(h, recs[0].offset, 8);
    h = put_be(h, total - 12, 4);
    h = put_be(h, UINT32_MAX, 4); /* partitionLeaderEpoch -1 */
    *h++ = 2;
    uint8_t *crc_at = h;
    h += 4;
    h = put_be(h, 0, 2);
    h = put_be(h, recs[n - 1].offset - recs[0].offset, 4);
    h = put_be(h, (uint64_t)base_ts, 8);
    h = put_be(h, (uint64_t)max_ts, 8);
    h = put_be(h, UINT64_MAX, 8); /* producerId -1 */
    h = put_be(h, UINT16_MAX, 2); /* producerEpoch -1 */
    h = put_be(h, UINT32_MAX, 4); /* baseSequence -1 */
    put_be(h, n, 4);
    put_be(crc_at, crc32c(0, out + CRC_FROM, total - CRC_FROM), 4);
    return (int64_t)total;
}
