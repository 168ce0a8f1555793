/* kafka_batch.c: records as Kafka record batches (magic v2), for the Kafka-wire listener's
 * fetches. Python encoded them at ~5 us a record; here it is a pass over the buffers that
 * walfs_read_offset filled.
 *
 * Input, per record: the meta section the Python layer writes (walfs/records.py,
 * little-endian; empty when there is no key, no header, no producer timestamp and the
 * value is not null):
 *   u8 version (1, or 2 when flag 4 or 8 is set) | u8 flags (1: key, 2: producer
 *   timestamp, 4: null value, 8: producer section; 4 and 8 in version 2 only)
 *   | [i64 timestamp_ms] | [u32 key_len, key] | u32 n_headers | n x (u16 name_len, name,
 *   i32 value_len (-1 = null), value) | [producer section, 18 bytes: i64 producer id,
 *   i16 epoch, i32 base sequence, i32 record count; not sent to consumers]
 * then the value (empty for a null value: Kafka's tombstone, sent back as length -1).
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
#include "walfs_kafka.h"

#include <stdlib.h>
#include <string.h>

#define CRC_FROM 21   /* the CRC covers the batch from attributes on */

typedef struct kmeta {
    const uint8_t *key;
    int64_t key_len; /* -1: null */
    int64_t ts;
    const uint8_t *headers; /* n_headers entries in the meta's own layout */
    uint32_t n_headers;
    int null_value; /* a tombstone: the value goes out as length -1 */
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
    /* by_clz[c]: the bytes of a varint of 64 - c significant bits, ceil((64 - c) / 7), at
     * least 1 (a table load, where the division by 7 was a multiply on the record's path) */
    static const uint8_t by_clz[64] = {10, 9, 9, 9, 9, 9, 9, 9, 8, 8, 8, 8, 8, 8, 8, 7, 7, 7, 7, 7, 7, 7,
                                       6, 6, 6, 6, 6, 6, 6, 5, 5, 5, 5, 5, 5, 5, 4, 4, 4, 4, 4, 4, 4, 3,
                                       3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1};
    return by_clz[__builtin_clzll(z | 1)];
}

static uint8_t *put_varint(uint8_t *p, int64_t v)
{
    uint64_t z = zigzag(v);
    if (z < 0x80) {
        *p = (uint8_t)z;
        return p + 1;
    }
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
    out->null_value = 0;
    if (len == 0) return 0;
    if (len == 14 && m[0] == 1 && m[1] == 2 && le32(m + 10) == 0) { /* the common one: a producer timestamp */
        out->ts = (int64_t)le64(m + 2);
        return 0;
    }
    if (len < 6 || (m[0] != 1 && m[0] != 2)) return -EBADMSG;
    uint8_t flags = m[1];
    if (flags & (4 | 8)) {
        if (m[0] != 2) return -EBADMSG;
        out->null_value = (flags & 4) != 0;
        if (flags & 8) { /* the producer section closes the meta: not part of the record */
            if (len < 6 + 18) return -EBADMSG;
            len -= 18;
        }
    }
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
static inline __attribute__((always_inline)) size_t put_record_as(uint8_t *out, const kmeta_t *km, int64_t ts_delta,
                                                                  int64_t off_delta, const uint8_t *value,
                                                                  uint32_t value_len)
{
    size_t n = 1 + varint_size(ts_delta) + varint_size(off_delta);
    n += km->key_len < 0 ? 1 : varint_size(km->key_len) + (size_t)km->key_len;
    n += (km->null_value ? 1 : varint_size(value_len)) + value_len + varint_size(km->n_headers);
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
    p = put_varint(p, km->null_value ? -1 : (int64_t)value_len);
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

/* put_record_as, with the common record (no key, no header, a value) compiled apart: the
 * same code with those known, so its size is a few additions and its bytes a few stores. */
static inline __attribute__((always_inline)) size_t put_record(uint8_t *out, const kmeta_t *km, int64_t ts_delta,
                                                               int64_t off_delta, const uint8_t *value,
                                                               uint32_t value_len)
{
    static const kmeta_t plain = {.key_len = -1};
    if (km->key_len < 0 && km->n_headers == 0 && !km->null_value)
        return put_record_as(out, &plain, ts_delta, off_delta, value, value_len);
    return put_record_as(out, km, ts_delta, off_delta, value, value_len);
}

/* The batch header (layout at the top of this file) in front of records already written
 * at out + WALFS_KAFKA_BATCH_HEAD, out[0..total) the whole batch; its CRC last, over what follows it. */
static void put_batch_head(uint8_t *out, uint64_t total, uint64_t first_off, uint64_t last_off, int64_t base_ts,
                           int64_t max_ts, uint32_t n)
{
    uint8_t *h = out;
    h = put_be(h, first_off, 8);
    h = put_be(h, total - 12, 4);
    h = put_be(h, UINT32_MAX, 4); /* partitionLeaderEpoch -1 */
    *h++ = 2;
    uint8_t *crc_at = h;
    h += 4;
    h = put_be(h, 0, 2);
    h = put_be(h, last_off - first_off, 4);
    h = put_be(h, (uint64_t)base_ts, 8);
    h = put_be(h, (uint64_t)max_ts, 8);
    h = put_be(h, UINT64_MAX, 8); /* producerId -1 */
    h = put_be(h, UINT16_MAX, 2); /* producerEpoch -1 */
    h = put_be(h, UINT32_MAX, 4); /* baseSequence -1 */
    put_be(h, n, 4);
    put_be(crc_at, crc32c(0, out + CRC_FROM, total - CRC_FROM), 4);
}

/* Where record i of a batch to encode comes from: a read's buffer and descriptors
 * (walfs_kafka_batch), or a writer's bodies, offsets 0.. and one append time
 * (walfs_kafka_batch_pieces). */
typedef struct batch_src {
    const uint8_t *buf;
    const walfs_rec_t *recs; /* NULL: bodies */
    const uint8_t *const *bodies;
    const uint32_t *meta_lens, *value_lens;
    int64_t ts;
} batch_src_t;

typedef struct src_rec {
    const uint8_t *body;
    uint32_t meta_len, value_len;
    int64_t ts;
    uint64_t offset;
} src_rec_t;

static src_rec_t src_rec(const batch_src_t *src, uint32_t i)
{
    if (src->recs) {
        const walfs_rec_t *r = &src->recs[i];
        return (src_rec_t){src->buf + r->buf_pos, r->meta_len, r->value_len, r->timestamp_ms, r->offset};
    }
    return (src_rec_t){src->bodies[i], src->meta_lens[i], src->value_lens[i], src->ts, i};
}

/* A batch's size and timestamps, every meta section checked (one pass, nothing written). */
typedef struct batch_plan {
    uint64_t total;
    int64_t base_ts, max_ts;
} batch_plan_t;

static int plan_batch(const batch_src_t *src, uint32_t n, batch_plan_t *plan)
{
    kmeta_t km;
    uint64_t first_off = src_rec(src, 0).offset;
    *plan = (batch_plan_t){.total = WALFS_KAFKA_BATCH_HEAD};
    for (uint32_t i = 0; i < n; i++) {
        src_rec_t r = src_rec(src, i);
        if (parse_meta(r.body, r.meta_len, r.ts, &km) || (km.null_value && r.value_len)) return -EBADMSG;
        if (i == 0) plan->base_ts = plan->max_ts = km.ts;
        if (km.ts > plan->max_ts) plan->max_ts = km.ts;
        size_t len = put_record(NULL, &km, km.ts - plan->base_ts, (int64_t)(r.offset - first_off), NULL, r.value_len);
        plan->total += varint_size((int64_t)len) + len;
    }
    return plan->total - 12 > INT32_MAX ? -ENOBUFS : 0;
}

/* The planned batch into out (plan->total bytes, checked by plan_batch). */
static void write_batch(const batch_src_t *src, uint32_t n, const batch_plan_t *plan, uint8_t *out)
{
    kmeta_t km;
    uint64_t first_off = src_rec(src, 0).offset;
    uint8_t *p = out + WALFS_KAFKA_BATCH_HEAD;
    for (uint32_t i = 0; i < n; i++) {
        src_rec_t r = src_rec(src, i);
        parse_meta(r.body, r.meta_len, r.ts, &km);
        int64_t ts_delta = km.ts - plan->base_ts, off_delta = (int64_t)(r.offset - first_off);
        const uint8_t *value = r.body + r.meta_len;
        size_t len = put_record(NULL, &km, ts_delta, off_delta, value, r.value_len);
        p = put_varint(p, (int64_t)len);
        p += put_record(p, &km, ts_delta, off_delta, value, r.value_len);
    }
    put_batch_head(out, plan->total, first_off, src_rec(src, n - 1).offset, plan->base_ts, plan->max_ts, n);
}

/* The batch planned, then written into memory allocated for it: its length, or -errno. */
static int64_t encode_batch(const batch_src_t *src, uint32_t n, uint8_t **out)
{
    batch_plan_t plan;
    int rc = plan_batch(src, n, &plan);
    if (rc) return rc;
    if (!(*out = malloc((size_t)plan.total))) return -ENOMEM;
    write_batch(src, n, &plan, *out);
    return (int64_t)plan.total;
}

int64_t walfs_kafka_batch(const uint8_t *buf, const walfs_rec_t *recs, uint32_t n, uint8_t **out)
{
    *out = NULL;
    if (n == 0) return 0;
    batch_src_t src = {.buf = buf, .recs = recs};
    return encode_batch(&src, n, out);
}

int64_t walfs_kafka_batch_pieces(uint32_t n, uint32_t n_pieces, const uint8_t *const *pieces,
                                 const uint64_t *piece_lens, const uint32_t *meta_lens, const uint32_t *value_lens,
                                 int64_t timestamp_ms, uint8_t **out)
{
    *out = NULL;
    if (n == 0) return 0;
    if (n_pieces == 0) return -EINVAL;
    const uint8_t **bodies = malloc((size_t)n * sizeof(*bodies));
    if (!bodies) return -ENOMEM;
    uint8_t *joined;
    int64_t rc = bodies_from_pieces(n, n_pieces, pieces, piece_lens, meta_lens, value_lens, bodies, &joined);
    if (!rc) {
        batch_src_t src = {.bodies = bodies, .meta_lens = meta_lens, .value_lens = value_lens, .ts = timestamp_ms};
        rc = encode_batch(&src, n, out);
    }
    free(joined);
    free(bodies);
    return rc;
}

void walfs_free(void *p)
{
    free(p);
}

/* ---- a fetch straight from the log: read and encode in one pass ----
 * The records are encoded from the mapped segment into out, each checked against its
 * walfs CRC first (four at a time, interleaved), so nothing is copied into a read buffer
 * on the way and nothing unchecked reaches out. Same limits as walfs_read_offset: at
 * least one record when any exists, then up to max_records and max_bytes of stored
 * bodies (meta || value), and as many as out holds. Per record (h/kread,
 * docs/benchmarks.md): the common one (no key, no header: an empty meta or the producer's
 * timestamp alone) is parsed by one comparison and written by put_record's copy with those
 * known; where records are long the run's next bytes are prefetched as each four are
 * located, since a consumer's fetch is usually the first to touch them. */

/* How far past the record being located the walk asks for the run's bytes (prefetch):
 * records lie back to back in a run, so these are the next records' headers and bodies.
 * The hardware's own prefetch stops at each 4 KiB page; a fetch that reads pages for the
 * first time (a consumer behind the producer) waited on them in the CRC check. */
#define PREFETCH_AHEAD 8192
#define PREFETCH_FROM 256

typedef struct located {
    rec_at_t at; /* first: fmt_rec_check_q */
    uint64_t offset;
} located_t;

/* Up to four next records from (*bi, *idx), located (bounds-checked) and CRC-checked;
 * stops early at max_records, max_bytes (past the first record, counted in *planned) or
 * the end. Returns how many lead intact; *bad is set when the one after them failed.
 * *ahead: where the prefetch of the bytes after them has got to (0 at first). */
static int next_checked(walfs_t *wal, const stream_t *s, size_t *bi, uint64_t *idx, uint32_t room,
                        uint64_t max_bytes, uint64_t *planned, int first, located_t *q, int *bad,
                        uintptr_t *ahead)
{
    int nq = 0;
    *bad = 0;
    while (nq < 4 && (uint32_t)nq < room && *bi < s->n_blocks) {
        const block_t *b = s->blocks[*bi];
        if (*idx >= b->count) {
            (*bi)++;
            *idx = 0;
            continue;
        }
        located_t *l = &q[nq];
        if (record_locate(b, *idx, &l->at.p, &l->at.r)) {
            *bad = 1;
            break;
        }
        uint64_t body = (uint64_t)l->at.r.meta_len + l->at.r.value_len;
        if (!(first && nq == 0) && *planned + body > max_bytes) break;
        *planned += body;
        l->offset = b->first_offset + *idx;
        (*idx)++;
        nq++;
    }
    if (nq) {
        const located_t *last = &q[nq - 1];
        uintptr_t end = (uintptr_t)last->at.p + REC_HDR_SIZE + last->at.r.meta_len + last->at.r.value_len;
        if (end - (uintptr_t)q[0].at.p >= PREFETCH_FROM * (uintptr_t)nq) {
            uintptr_t a = *ahead;
            if (a < end || a > end + PREFETCH_AHEAD) a = end; /* the first records, or a new run */
            for (; a < end + PREFETCH_AHEAD; a += 64) __builtin_prefetch((const void *)a);
            *ahead = a;
        }
    }
    int good = fmt_rec_check_q(q, sizeof(*q), wal->crc_seed, nq);
    if (good < nq) *bad = 1;
    return good;
}

int64_t walfs_read_kafka_batch(walfs_t *wal, uint32_t stream_no, uint64_t offset, uint32_t max_records,
                               uint64_t max_bytes, uint8_t *out, uint64_t outlen, uint64_t *needed)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    int64_t rc = 0;
    if (offset < s->low_offset || offset > s->next_offset) {
        rc = -ERANGE;
        goto out;
    }
    if (offset == s->next_offset || max_records == 0) goto out;
    size_t bi = find_block_by_offset(s, offset);
    if (offset < s->blocks[bi]->first_offset) {
        rc = -ERANGE;
        goto out;
    }
    uint64_t idx = offset - s->blocks[bi]->first_offset, planned = 0, at = WALFS_KAFKA_BATCH_HEAD;
    int64_t base_ts = 0, max_ts = 0;
    uint32_t n = 0;
    uint64_t first_off = offset, last_off = offset;
    located_t q[4];
    uintptr_t ahead = 0;
    int bad = 0, stop = 0;
    while (!stop && n < max_records) {
        int good = next_checked(wal, s, &bi, &idx, max_records - n, max_bytes, &planned, n == 0, q, &bad, &ahead);
        for (int k = 0; k < good; k++) {
            const located_t *l = &q[k];
            const uint8_t *meta = l->at.p + REC_HDR_SIZE;
            kmeta_t km;
            if (parse_meta(meta, l->at.r.meta_len, l->at.r.ts, &km) || (km.null_value && l->at.r.value_len)) {
                if (n == 0) {
                    *needed = l->offset;
                    rc = -EINVAL;
                    goto out;
                }
                stop = 1; /* hand out the ones before it; the next call reports it */
                break;
            }
            if (n == 0) base_ts = max_ts = km.ts;
            if (km.ts > max_ts) max_ts = km.ts;
            int64_t ts_delta = km.ts - base_ts, off_delta = (int64_t)(l->offset - first_off);
            const uint8_t *value = meta + l->at.r.meta_len;
            size_t len = put_record(NULL, &km, ts_delta, off_delta, value, l->at.r.value_len);
            uint64_t whole = varint_size((int64_t)len) + len;
            if (at + whole > outlen || at + whole - 12 > INT32_MAX) {
                if (n == 0) {
                    *needed = at + whole;
                    rc = -ENOBUFS;
                    goto out;
                }
                stop = 1;
                break;
            }
            uint8_t *p = put_varint(out + at, (int64_t)len);
            put_record(p, &km, ts_delta, off_delta, value, l->at.r.value_len);
            at += whole;
            last_off = l->offset;
            n++;
        }
        if (bad && n == 0) { /* the first record is damaged: reported, never served */
            *needed = offset;
            rc = -EBADMSG;
            goto out;
        }
        if (bad || good < 4) break; /* a damaged record ends the batch; so do the limits */
    }
    if (n == 0) goto out;
    put_batch_head(out, at, first_off, last_off, base_ts, max_ts, n);
    rc = (int64_t)at;
out:
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- the other way: a produce request's records as walfs records ----
 * Input: the records section of one (decompressed) v2 batch. Output, per record, the
 * body the Python layer would write (meta v1 || value; walfs/records.py): flags carry a
 * key when the record has one (null key: none) and the producer timestamp
 * (base_ts + delta) unless base_ts is -1; a null value (a tombstone) is stored empty,
 * with meta version 2 and flag 4. Header names must be UTF-8, as Python's decoder
 * requires. */

static int get_varint(const uint8_t *p, uint64_t len, uint64_t *pos, int64_t *v)
{
    uint64_t z = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= len) return -EBADMSG;
        uint8_t b = p[(*pos)++];
        z |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            return 0;
        }
    }
    return -EBADMSG;
}

/* A length-prefixed field: *n = -1 for null. */
static int get_field(const uint8_t *p, uint64_t len, uint64_t *pos, const uint8_t **f, int64_t *n)
{
    if (get_varint(p, len, pos, n)) return -EBADMSG;
    if (*n < -1) return -EBADMSG;
    if (*n == -1) return 0;
    if ((uint64_t)*n > len - *pos) return -EBADMSG;
    *f = p + *pos;
    *pos += (uint64_t)*n;
    return 0;
}

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). */
static int utf8_ok(const uint8_t *s, int64_t n)
{
    for (int64_t i = 0; i < n;) {
        uint8_t c = s[i];
        int k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (k < 0 || i + k >= n + (k == 0)) return 0;
        uint32_t cp = k == 0 ? c : k == 1 ? c & 0x1f : k == 2 ? c & 0x0f : c & 0x07;
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int64_t walfs_kafka_records(const uint8_t *body, uint64_t len, uint32_t count, int64_t base_ts, uint8_t *out,
                            uint64_t outlen, uint32_t *meta_lens, uint32_t *value_lens, uint64_t *needed)
{
    uint64_t pos = 0, used = 0;
    for (uint32_t i = 0; i < count; i++) {
        int64_t rec_len, ts_delta, off_delta, key_n, value_n, n_headers;
        const uint8_t *key = NULL, *value = NULL;
        if (get_varint(body, len, &pos, &rec_len) || rec_len < 0 || (uint64_t)rec_len > len - pos) return -EBADMSG;
        uint64_t rec_end = pos + (uint64_t)rec_len;
        pos++; /* record attributes: unused in v2 */
        if (get_varint(body, rec_end, &pos, &ts_delta) || get_varint(body, rec_end, &pos, &off_delta) ||
            get_field(body, rec_end, &pos, &key, &key_n) || get_field(body, rec_end, &pos, &value, &value_n) ||
            get_varint(body, rec_end, &pos, &n_headers) || n_headers < 0 || n_headers > rec_len)
            return -EBADMSG;
        int null_value = value_n < 0; /* a tombstone: stored empty, flagged in the meta */
        if (null_value) value_n = 0;
        int has_ts = base_ts >= 0;
        uint64_t meta = 0;
        if (key_n >= 0 || n_headers > 0 || has_ts || null_value)
            meta = 2 + (has_ts ? 8 : 0) + (key_n >= 0 ? 4 + (uint64_t)key_n : 0) + 4;
        uint64_t hpos = pos;
        for (int64_t h = 0; h < n_headers; h++) {
            const uint8_t *hk = NULL, *hv = NULL;
            int64_t hk_n, hv_n;
            if (get_field(body, rec_end, &hpos, &hk, &hk_n) || get_field(body, rec_end, &hpos, &hv, &hv_n)) return -EBADMSG;
            if (hk_n < 0 || hk_n > UINT16_MAX || !utf8_ok(hk, hk_n) || hv_n > INT32_MAX) return -EBADMSG;
            meta += 2 + (uint64_t)hk_n + 4 + (hv_n > 0 ? (uint64_t)hv_n : 0);
        }
        if (hpos != rec_end || meta > UINT32_MAX || (uint64_t)value_n > UINT32_MAX) return -EBADMSG;
        uint64_t at = used;
        used += meta + (uint64_t)value_n;
        if (used > outlen) { /* sizing: keep validating, write nothing */
            pos = rec_end;
            continue;
        }
        meta_lens[i] = (uint32_t)meta;
        value_lens[i] = (uint32_t)value_n;
        uint8_t *p = out + at;
        if (meta) {
            *p++ = null_value ? 2 : 1;
            *p++ = (uint8_t)((key_n >= 0 ? 1 : 0) | (has_ts ? 2 : 0) | (null_value ? 4 : 0));
            if (has_ts) {
                put_le(p, (uint64_t)(base_ts + ts_delta), 8);
                p += 8;
            }
            if (key_n >= 0) {
                put_le(p, (uint64_t)key_n, 4);
                memcpy(p + 4, key, (size_t)key_n);
                p += 4 + key_n;
            }
            put_le(p, (uint64_t)n_headers, 4);
            p += 4;
            for (int64_t h = 0; h < n_headers; h++) {
                const uint8_t *hk = NULL, *hv = NULL;
                int64_t hk_n, hv_n;
                get_field(body, rec_end, &pos, &hk, &hk_n);
                get_field(body, rec_end, &pos, &hv, &hv_n);
                put_le(p, (uint64_t)hk_n, 2);
                memcpy(p + 2, hk, (size_t)hk_n);
                p += 2 + hk_n;
                put_le(p, (uint64_t)(hv_n < 0 ? -1 : hv_n), 4);
                p += 4;
                if (hv_n > 0) {
                    memcpy(p, hv, (size_t)hv_n);
                    p += hv_n;
                }
            }
        }
        if (value_n) memcpy(p, value, (size_t)value_n);
        pos = rec_end;
    }
    if (pos != len) return -EBADMSG;
    if (used > outlen) {
        if (needed) *needed = used;
        return -ENOBUFS;
    }
    return (int64_t)used;
}
