/* reader.c: reads by offset, by gid, by view byte position and by time. Every record is
 * checked against its CRC before its bytes are handed out. Reads hold the stream's short
 * lock (not its append lock), so they run while an append is writing. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

const uint8_t *run_ptr(const block_t *b, uint64_t rel)
{
    return b->seg->map + b->file_off + rel;
}

void slot_get(const block_t *b, uint64_t i, slot_t *s)
{
    fmt_slot_parse(run_ptr(b, b->run_size - (i + 1) * SLOT_SIZE), s);
}

/* The last run whose first_offset <= offset (0 if none). */
size_t find_block_by_offset(const stream_t *s, uint64_t offset)
{
    size_t lo = 0, hi = s->n_blocks;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (s->blocks[mid]->first_offset <= offset)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int block_quarantined(const block_t *b, uint64_t idx)
{
    uint32_t lo = 0, hi = b->n_quar;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (b->quar[mid].hi <= idx)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < b->n_quar && b->quar[lo].lo <= idx;
}

int block_quarantine(block_t *b, uint64_t idx)
{
    if (block_quarantined(b, idx)) return 0;
    uint32_t at = 0;
    while (at < b->n_quar && b->quar[at].hi <= idx) at++;
    if (at > 0 && b->quar[at - 1].hi == idx) { /* the usual case: recovery goes in index order */
        b->quar[at - 1].hi++;
        if (at < b->n_quar && b->quar[at].lo == idx + 1) {
            b->quar[at - 1].hi = b->quar[at].hi;
            memmove(&b->quar[at], &b->quar[at + 1], (b->n_quar - at - 1) * sizeof(*b->quar));
            b->n_quar--;
        }
        return 0;
    }
    if (at < b->n_quar && b->quar[at].lo == idx + 1) {
        b->quar[at].lo = idx;
        return 0;
    }
    quar_range_t *q = realloc(b->quar, (b->n_quar + 1) * sizeof(*q));
    if (!q) return -ENOMEM;
    memmove(&q[at + 1], &q[at], (b->n_quar - at) * sizeof(*q));
    q[at] = (quar_range_t){idx, idx + 1};
    b->quar = q;
    b->n_quar++;
    return 0;
}

void block_free(block_t *b)
{
    if (!b) return;
    free(b->quar);
    free(b);
}

/* Locates record idx (< b->count) of run b and checks that its slot and header lie inside
 * the run's data area and agree with each other (not its CRC). A quarantined record
 * (recovery found it damaged) is refused whatever its bytes say now. */
int record_locate(const block_t *b, uint64_t idx, const uint8_t **p, rec_hdr_t *r)
{
    if (b->n_quar && block_quarantined(b, idx)) return -EBADMSG;
    slot_t sl;
    slot_get(b, idx, &sl);
    uint64_t limit = b->run_size - b->count * SLOT_SIZE;
    if (sl.pos < BLK_DATA_OFF || (uint64_t)sl.pos + REC_HDR_SIZE > limit) return -EBADMSG;
    *p = run_ptr(b, sl.pos);
    fmt_rec_parse(*p, r);
    if ((uint64_t)sl.pos + REC_HDR_SIZE + r->meta_len + r->value_len > limit) return -EBADMSG;
    if (r->gid != b->first_gid + sl.gid_delta || r->stream_no != b->stream_no) return -EBADMSG;
    return 0;
}

/* Locates record idx of run b and checks it, CRC included. */
static int record_at(walfs_t *wal, const block_t *b, uint64_t idx, const uint8_t **p, rec_hdr_t *r)
{
    int rc = record_locate(b, idx, p, r);
    return rc ? rc : fmt_rec_check(*p, wal->crc_seed, r);
}

static int64_t read_from(walfs_t *wal, const stream_t *s, size_t bi, uint64_t idx, uint32_t max_records,
                         uint64_t max_bytes, uint8_t *buf, uint64_t buflen, walfs_rec_t *recs, uint64_t *needed)
{
    int64_t n = 0;
    uint64_t used = 0;
    while ((uint64_t)n < max_records && bi < s->n_blocks) {
        const block_t *b = s->blocks[bi];
        if (idx >= b->count) {
            bi++;
            idx = 0;
            continue;
        }
        const uint8_t *p;
        rec_hdr_t r;
        if (record_at(wal, b, idx, &p, &r)) {
            if (n > 0) return n; /* hand out the good ones; the next call reports this one */
            *needed = b->first_offset + idx;
            return -EBADMSG;
        }
        uint64_t body = (uint64_t)r.meta_len + r.value_len;
        if (used + body > buflen || (n > 0 && used + body > max_bytes)) {
            if (n == 0) {
                *needed = body;
                return -ENOBUFS;
            }
            break;
        }
        memcpy(buf + used, p + REC_HDR_SIZE, body);
        recs[n] = (walfs_rec_t){r.gid, b->first_offset + idx, r.ts, r.meta_len, r.value_len, used};
        used += body;
        n++;
        idx++;
    }
    return n;
}

int64_t walfs_read_offset(walfs_t *wal, uint32_t stream_no, uint64_t offset, uint32_t max_records,
                          uint64_t max_bytes, uint8_t *buf, uint64_t buflen, walfs_rec_t *recs, uint64_t *needed)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    int64_t rc;
    if (offset < s->low_offset || offset > s->next_offset)
        rc = -ERANGE;
    else if (offset == s->next_offset || max_records == 0)
        rc = 0;
    else {
        size_t bi = find_block_by_offset(s, offset);
        const block_t *b = s->blocks[bi];
        if (offset < b->first_offset)
            rc = -ERANGE;
        else
            rc = read_from(wal, s, bi, offset - b->first_offset, max_records, max_bytes, buf, buflen, recs, needed);
    }
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int64_t walfs_read(walfs_t *wal, uint32_t stream_no, uint64_t start_gid, uint32_t max_records, uint64_t max_bytes,
                   uint8_t *buf, uint64_t buflen, walfs_rec_t *recs, uint64_t *needed)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    int64_t rc = -ENOENT;
    /* The last run that starts at or before the gid. */
    size_t lo = 0, hi = s->n_blocks;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (s->blocks[mid]->first_gid <= start_gid)
            lo = mid;
        else
            hi = mid;
    }
    if (s->n_blocks && s->blocks[lo]->first_gid <= start_gid && s->blocks[lo]->count) {
        const block_t *b = s->blocks[lo];
        uint64_t delta = start_gid - b->first_gid;
        uint64_t l = 0, h = b->count; /* slots hold increasing gid deltas */
        while (l < h) {
            uint64_t m = (l + h) / 2;
            slot_t sl;
            slot_get(b, m, &sl);
            if (sl.gid_delta < delta)
                l = m + 1;
            else
                h = m;
        }
        slot_t sl;
        if (l < b->count && (slot_get(b, l, &sl), sl.gid_delta == delta)) {
            if (b->first_offset + l < s->low_offset)
                rc = -ERANGE;
            else
                rc = read_from(wal, s, lo, l, max_records, max_bytes, buf, buflen, recs, needed);
        }
    }
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The last run whose first_byte <= pos (0 if none). */
static size_t find_block_by_byte(const stream_t *s, uint64_t pos)
{
    size_t lo = 0, hi = s->n_blocks;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (s->blocks[mid]->first_byte <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* View position of stored record `offset` (< next_offset); -ERANGE if not stored. */
static int view_pos(const stream_t *s, uint64_t offset, uint64_t *pos)
{
    if (!s->n_blocks) return -ERANGE;
    const block_t *b = s->blocks[find_block_by_offset(s, offset)];
    if (offset < b->first_offset || offset - b->first_offset >= b->count) return -ERANGE;
    slot_t sl;
    slot_get(b, offset - b->first_offset, &sl);
    *pos = b->first_byte + sl.view_delta;
    return 0;
}

/* Index of the last record of b whose view position is <= rel. */
static uint64_t find_view(const block_t *b, uint64_t rel)
{
    uint64_t l = 0, h = b->count;
    while (h - l > 1) {
        uint64_t m = (l + h) / 2;
        slot_t sl;
        slot_get(b, m, &sl);
        if (sl.view_delta <= rel)
            l = m;
        else
            h = m;
    }
    return l;
}

/* View position of the first retained record (or the end). Under s->lock. */
uint64_t stream_low_byte(const stream_t *s)
{
    uint64_t pos;
    if (s->low_offset >= s->next_offset || view_pos(s, s->low_offset, &pos)) return s->next_byte;
    return pos;
}


/* A record read_bytes has located and will copy once its CRC is checked. */
typedef struct view_piece {
    rec_at_t at; /* first: fmt_rec_check_q */
    uint64_t skip, take; /* value bytes skipped and copied */
    int newline;         /* whether the view's '\n' after the value is copied too */
    uint64_t offset;     /* the record's offset (to name it when it is corrupt) */
} view_piece_t;

/* Checks the queued records' CRCs (four at a time when there are four) and copies them
 * in order. Returns 0, or -EBADMSG with *bad set to the first corrupt one's offset. */
static int copy_pieces(walfs_t *wal, const view_piece_t *q, int nq, uint8_t *buf, uint64_t *got, uint64_t *bad)
{
    int good = fmt_rec_check_q(q, sizeof(*q), wal->crc_seed, nq);
    if (good < nq) {
        *bad = q[good].offset;
        return -EBADMSG;
    }
    for (int k = 0; k < nq; k++) {
        memcpy(buf + *got, q[k].at.p + REC_HDR_SIZE + q[k].at.r.meta_len + q[k].skip, q[k].take);
        *got += q[k].take;
        if (q[k].newline) buf[(*got)++] = '\n';
    }
    return 0;
}

int64_t walfs_read_bytes(walfs_t *wal, uint32_t stream_no, uint64_t pos, uint8_t *buf, uint64_t len,
                         uint64_t *bad_offset)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    int64_t rc = 0;
    if (pos < stream_low_byte(s)) {
        rc = -ERANGE;
        goto out;
    }
    if (pos >= s->next_byte || len == 0 || !s->n_blocks) goto out;
    size_t bi = find_block_by_byte(s, pos);
    const block_t *first = s->blocks[bi];
    uint64_t idx = find_view(first, pos - first->first_byte);
    slot_t sl;
    slot_get(first, idx, &sl);
    /* Only the first record can start before pos; the rest are copied whole. Records are
     * queued four at a time so that their CRCs are checked in one interleaved pass. A
     * corrupt record anywhere in the range fails the whole read (never a short count: a
     * short read means the end to its caller, and to the kernel behind a FUSE READ). */
    uint64_t skip = pos - (first->first_byte + sl.view_delta);
    uint64_t planned = 0, got = 0;
    view_piece_t q[4];
    int nq = 0;
    while (planned < len && bi < s->n_blocks) {
        const block_t *b = s->blocks[bi];
        if (idx >= b->count) {
            bi++;
            idx = 0;
            continue;
        }
        view_piece_t *v = &q[nq];
        v->offset = b->first_offset + idx;
        if (record_locate(b, idx, &v->at.p, &v->at.r)) {
            /* The records queued before it come first in the view: name the first bad one. */
            if (nq && copy_pieces(wal, q, nq, buf, &got, bad_offset)) goto bad;
            *bad_offset = b->first_offset + idx;
            goto bad;
        }
        uint64_t vlen = v->at.r.value_len;
        v->skip = skip;
        v->take = skip < vlen ? (vlen - skip < len - planned ? vlen - skip : len - planned) : 0;
        planned += v->take;
        v->newline = planned < len && skip + v->take == vlen;
        planned += (uint64_t)v->newline;
        skip = 0;
        idx++;
        if (++nq == 4) {
            if (copy_pieces(wal, q, nq, buf, &got, bad_offset)) goto bad;
            nq = 0;
        }
    }
    if (nq && copy_pieces(wal, q, nq, buf, &got, bad_offset)) goto bad;
    rc = (int64_t)got;
    goto out;
bad:
    rc = -EBADMSG;
out:
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* 1 if every page of [p, p+len) is in the page cache, 0 if not, -errno. */
static int pages_resident(const uint8_t *p, uint64_t len)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = (uintptr_t)p & ~(page - 1);
    size_t pages = ((uintptr_t)p + len - from + page - 1) / page;
    unsigned char vec[256];
    for (size_t done = 0; done < pages;) {
        size_t n = pages - done < sizeof(vec) ? pages - done : sizeof(vec);
        if (mincore((void *)(from + done * page), n * page, vec)) return -errno;
        for (size_t i = 0; i < n; i++)
            if (!(vec[i] & 1)) return 0;
        done += n;
    }
    return 1;
}

int walfs_bytes_resident(walfs_t *wal, uint32_t stream_no, uint64_t pos, uint64_t len)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    int rc = 1;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    /* (Bytes below the low watermark are not checked here: the read itself refuses them.) */
    if (pos >= s->next_byte || !s->n_blocks || len == 0) goto out;
    /* Every run the range touches (a stream's first runs are small: a read of 128 KiB
     * spans several). Without touching the mapping (a page fault here would be the very
     * wait this call exists to avoid): each run's index slots, which the read searches,
     * and the stretch of records that the range's view bytes take in it, estimated from
     * the run's ratio of record bytes to view bytes, with a header's worth of margin
     * either side. */
    uint64_t end_pos = len > s->next_byte - pos ? s->next_byte : pos + len;
    for (size_t k = find_block_by_byte(s, pos); rc == 1 && k < s->n_blocks && pos < end_pos; k++) {
        const block_t *b = s->blocks[k];
        if (pos < b->first_byte) break;
        uint64_t rel = pos - b->first_byte;
        if (rel >= b->byte_len || b->data_end <= BLK_DATA_OFF) continue;
        uint64_t here = end_pos - pos < b->byte_len - rel ? end_pos - pos : b->byte_len - rel;
        rc = pages_resident(run_ptr(b, b->run_size - b->count * SLOT_SIZE), b->count * SLOT_SIZE);
        if (rc != 1) break;
        uint64_t data = b->data_end - BLK_DATA_OFF;
        uint64_t at = BLK_DATA_OFF + (uint64_t)((double)rel * (double)data / (double)b->byte_len);
        uint64_t span = (uint64_t)((double)here * (double)data / (double)b->byte_len) + 2 * REC_HDR_SIZE;
        at = at > BLK_DATA_OFF + REC_HDR_SIZE ? at - REC_HDR_SIZE : BLK_DATA_OFF;
        uint64_t end = at + span < b->data_end ? at + span : b->data_end;
        rc = pages_resident(run_ptr(b, at), end - at);
        pos += here;
    }
out:
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int walfs_byte_position(walfs_t *wal, uint32_t stream_no, uint64_t offset, uint64_t *pos)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    int rc = 0;
    if (offset == s->next_offset)
        *pos = s->next_byte;
    else if (offset < s->low_offset || offset > s->next_offset)
        rc = -ERANGE;
    else
        rc = view_pos(s, offset, pos);
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int walfs_offset_at_byte(walfs_t *wal, uint32_t stream_no, uint64_t pos, uint64_t *offset)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    int rc = 0;
    if (pos >= s->next_byte) {
        *offset = s->next_offset;
    } else if (pos < stream_low_byte(s)) {
        rc = -ERANGE;
    } else {
        size_t lo = find_block_by_byte(s, pos);
        const block_t *b = s->blocks[lo];
        while (!b->count && lo + 1 < s->n_blocks) b = s->blocks[++lo];
        uint64_t idx = find_view(b, pos - b->first_byte);
        slot_t sl;
        uint64_t end = b->first_byte + b->byte_len;
        if (idx + 1 < b->count) {
            slot_get(b, idx + 1, &sl);
            end = b->first_byte + sl.view_delta;
        }
        *offset = b->first_offset + idx + (end <= pos ? 1 : 0);
    }
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int walfs_offset_for_time(walfs_t *wal, uint32_t stream_no, int64_t ts, uint64_t *offset)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    uint64_t result = s->next_offset;
    for (size_t bi = find_block_by_offset(s, s->low_offset); bi < s->n_blocks; bi++) {
        const block_t *b = s->blocks[bi];
        if (!b->count || b->last_ts < ts) continue;
        /* Append times never decrease within a stream: binary search the run. */
        uint64_t l = 0, h = b->count;
        while (l < h) {
            uint64_t m = (l + h) / 2, g = m;
            const uint8_t *p;
            rec_hdr_t r;
            /* A damaged record tells no time: the first good one after it does. Damaged
             * records count as late enough, so that a seek by time never passes one. */
            int bad;
            while ((bad = record_at(wal, b, g, &p, &r)) != 0 && g + 1 < h) g++;
            if (!bad && r.ts < ts)
                l = g + 1;
            else
                h = m;
        }
        result = b->first_offset + l;
        break;
    }
    if (result < s->low_offset) result = s->low_offset;
    *offset = result;
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* What walfs_verify_progress has checked so far, and whom to tell. */
typedef struct verify_progress {
    walfs_verify_progress_cb fn;
    void *ctx;
    uint32_t streams_done, streams;
    uint64_t records, bytes;
} verify_progress_t;

#define VERIFY_PROGRESS_EVERY 65536 /* records between two progress calls inside a stream */

/* Checks every record of one stream; returns how many problems it reported, or -EIO if
 * its data could not be read (a SIGBUS on the mapping). */
static int64_t verify_stream(walfs_t *wal, stream_t *s, walfs_fsck_cb cb, void *ctx, verify_progress_t *pr)
{
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    int64_t bad = 0;
    uint64_t expected = s->n_blocks ? s->blocks[0]->first_offset : 0;
    for (size_t bi = 0; bi < s->n_blocks; bi++) {
        const block_t *b = s->blocks[bi];
        if (b->first_offset > expected && b->first_offset <= s->low_offset) expected = b->first_offset;
        if (b->first_offset != expected) {
            bad++;
            if (cb) cb(ctx, s->no, expected, "missing records before this run");
        }
        expected = b->first_offset + b->count;
        for (uint64_t k = 0; k < b->count; k++) {
            const uint8_t *p;
            rec_hdr_t r;
            if (record_at(wal, b, k, &p, &r)) {
                bad++;
                if (cb)
                    cb(ctx, s->no, b->first_offset + k,
                       b->n_quar && block_quarantined(b, k) ? "record damaged: quarantined at open (fails its checks)"
                                                            : "record fails its checksum or index slot");
            } else {
                pr->bytes += REC_HDR_SIZE + (uint64_t)r.meta_len + r.value_len;
            }
            if (++pr->records % VERIFY_PROGRESS_EVERY == 0 && pr->fn &&
                pr->fn(pr->ctx, pr->streams_done, pr->streams, pr->records, pr->bytes)) {
                bad = -ECANCELED;
                goto out;
            }
        }
    }
out:
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return bad;
}

int64_t walfs_verify_progress(walfs_t *wal, walfs_fsck_cb cb, walfs_verify_progress_cb progress, void *ctx)
{
    int64_t bad = 0;
    size_t ns = atomic_load(&wal->n_streams);
    verify_progress_t pr = {progress, ctx, 0, (uint32_t)ns, 0, 0};
    for (size_t i = 0; i < ns; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        int64_t n = verify_stream(wal, s, cb, ctx, &pr);
        if (n == -ECANCELED) return n;
        if (n == -EIO) {
            n = 1;
            if (cb) cb(ctx, s->no, s->low_offset, "I/O error reading the stream's data (file cut short or disk error)");
        }
        bad += n;
        pr.streams_done = (uint32_t)(i + 1);
        if (progress && progress(ctx, pr.streams_done, pr.streams, pr.records, pr.bytes)) return -ECANCELED;
    }
    return bad;
}

int64_t walfs_verify(walfs_t *wal, walfs_fsck_cb cb, void *ctx)
{
    return walfs_verify_progress(wal, cb, NULL, ctx);
}
