/* recovery.c: rebuilds the in-memory state from the catalog and the segment files (see the
 * validity rule in format.c). Sealed runs are trusted from their seal header, and unsealed
 * runs up to a clean durable frontier (frontier.c); the records above it, or all of a run
 * whose frontier is not clean, are verified record by record; each stream is then cut
 * after its last complete append. Damage that a crash cannot explain is reported, never skipped: a damaged record
 * below a durable frontier (or in a sealed run) is quarantined (kept, refused to reads,
 * counted); damage to what places records (a hole before a sealed run) fails the open. */
#include "internal.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_block(const void *a, const void *b)
{
    const block_t *x = *(block_t *const *)a, *y = *(block_t *const *)b;
    if (x->first_offset != y->first_offset) return x->first_offset < y->first_offset ? -1 : 1;
    return x->first_gid < y->first_gid ? -1 : x->first_gid > y->first_gid;
}

static int list_segments(walfs_t *wal, uint64_t **ids, size_t *n)
{
    DIR *d = fdopendir(dup(wal->dirfd));
    if (!d) return -errno;
    size_t cap = 16;
    *ids = malloc(cap * sizeof(**ids));
    *n = 0;
    struct dirent *e;
    while (*ids && (e = readdir(d))) {
        uint64_t id;
        char tail[8];
        if (strlen(e->d_name) != 24 || sscanf(e->d_name, "seg-%16" SCNx64 ".%3s", &id, tail) != 2 ||
            strcmp(tail, "wal") != 0)
            continue;
        if (*n == cap) {
            cap *= 2;
            uint64_t *m = realloc(*ids, cap * sizeof(**ids));
            if (!m) {
                free(*ids);
                *ids = NULL;
                break;
            }
            *ids = m;
        }
        (*ids)[(*n)++] = id;
    }
    closedir(d);
    if (!*ids) return -ENOMEM;
    qsort(*ids, *n, sizeof(**ids), cmp_u64);
    return 0;
}

/* Returns 1 if bytes follow the run's last record; with `write`, zeroes the header they
 * would form (writer mode) so that later opens do not meet them again. They could never
 * validate (see the epoch rule in format.c); this keeps the report of later opens clean.
 * verify_run only looks: nothing is written before the whole stream is judged. */
static int clear_tail(walfs_t *wal, const block_t *b, int write)
{
    static const uint8_t zero[REC_HDR_SIZE];
    uint64_t pos = b->data_end;
    if (pos + REC_HDR_SIZE > b->run_size - b->count * SLOT_SIZE) return 0;
    if (memcmp(run_ptr(b, pos), zero, REC_HDR_SIZE) == 0) return 0;
    if (write && !wal->opt.read_only && seg_zero(wal, b->seg, b->file_off + pos, REC_HDR_SIZE) != 0)
        wal_log(wal, "could not clear the tail of a run");
    return 1;
}

/* Why a record is quarantined; singular and plural for the log line. */
enum { Q_FAILS, Q_SLOT, Q_UNFIT };
static const char *const q_why[3][2] = {
    {"fails its checks", "fail their checks"},
    {"proves itself but its index slot disagrees with it", "prove themselves but their index slots disagree with them"},
    {"has an index slot or header that does not fit the run", "have index slots or headers that do not fit the run"},
};

/* Consecutive quarantined records of one run, told in one line (a zeroed page holds many). */
typedef struct qlog {
    uint64_t first, n, byte;
    int why;
} qlog_t;

static void qlog_flush(walfs_t *wal, const stream_t *s, const block_t *b, qlog_t *q)
{
    if (!q->n) return;
    char name[64];
    seg_path(wal, b->seg->id, name, sizeof(name));
    const char *where = b->sealed ? "in a sealed run" : "below the run's durable frontier";
    if (q->n == 1)
        wal_error(wal, "%s/%s: stream %u (%.*s, partition %u), record at offset %" PRIu64 " (file byte %" PRIu64 ") %s; "
                       "it lies %s: quarantined (each read of it fails, every other record is served)",
                  wal->dir, name, b->stream_no, (int)s->name_len, s->name, s->partition, b->first_offset + q->first,
                  b->file_off + q->byte, q_why[q->why][0], where);
    else
        wal_error(wal, "%s/%s: stream %u (%.*s, partition %u), %" PRIu64 " records at offsets %" PRIu64 " to %" PRIu64
                       " (from file byte %" PRIu64 ") %s; they lie %s: quarantined (each read of one fails, every other "
                       "record is served)",
                  wal->dir, name, b->stream_no, (int)s->name_len, s->name, s->partition, q->n, b->first_offset + q->first,
                  b->first_offset + q->first + q->n - 1, b->file_off + q->byte, q_why[q->why][1], where);
    q->n = 0;
}

/* Record i of run b, of stream s, proved damaged where a crash cannot explain it (below a
 * durable frontier, or in a sealed run): kept in the count, refused to every read, reported
 * (a line naming the file, offsets and byte: at once, or with the records after it in `q`;
 * the open's `quarantined` count). */
static int quarantine(walfs_t *wal, const stream_t *s, block_t *b, uint64_t i, uint64_t pos, int why, qlog_t *q)
{
    if (block_quarantine(b, i)) return -ENOMEM;
    wal->report.quarantined++;
    qlog_t one = {0, 0, 0, 0};
    qlog_t *l = q ? q : &one;
    if (l->n && (l->first + l->n != i || l->why != why)) qlog_flush(wal, s, b, l);
    if (!l->n) *l = (qlog_t){i, 0, pos, why};
    l->n++;
    if (!q) qlog_flush(wal, s, b, l);
    return 0;
}

/* Whether the bytes at pos of run b are a record of it that proves itself: inside the run
 * and ending by `limit`, its stream, a gid above `after` (or first_gid for record 0), and its
 * crc. Its index slot is not looked at. */
static int proves_itself(const walfs_t *wal, const block_t *b, uint64_t i, uint64_t pos, uint64_t limit, uint64_t after,
                         rec_hdr_t *r)
{
    if (pos < BLK_DATA_OFF || pos + REC_HDR_SIZE > limit) return 0;
    const uint8_t *p = run_ptr(b, pos);
    fmt_rec_parse(p, r);
    if (pos + REC_HDR_SIZE + (uint64_t)r->meta_len + r->value_len > limit) return 0;
    if (r->stream_no != b->stream_no || (i == 0 ? r->gid != b->first_gid : r->gid <= after)) return 0;
    if (r->gid < b->first_gid || r->gid - b->first_gid > UINT32_MAX) return 0;
    return fmt_rec_check(p, wal->crc_seed, r) == 0;
}

/* The view length of run b (bi of stream s) when it ends in quarantined records whose value
 * lengths nothing proved: view_min is the least it can be (one '\n' per record). */
static uint64_t end_view(walfs_t *wal, const stream_t *s, size_t bi, const block_t *b, uint64_t view_min,
                         uint64_t last_bad_view, uint64_t last_bad_pos)
{
    uint64_t end = b->first_offset + b->count;
    /* A durable-end mark of the catalog that lands exactly on the run's end. */
    if (s->floor_offset == end && s->floor_byte >= b->first_byte + view_min) return s->floor_byte - b->first_byte;
    /* The next run, when it continues the offsets. */
    if (bi + 1 < s->n_blocks && s->blocks[bi + 1]->first_offset == end &&
        s->blocks[bi + 1]->first_byte >= b->first_byte + view_min)
        return s->blocks[bi + 1]->first_byte - b->first_byte;
    /* The last damaged record's own lengths, when its start view is known and they end it
     * exactly where the run's records end (a bit flipped in a length would not). */
    if (last_bad_view != UINT64_MAX && last_bad_pos + REC_HDR_SIZE <= b->data_end) {
        rec_hdr_t r;
        fmt_rec_parse(run_ptr(b, last_bad_pos), &r);
        if (last_bad_pos + REC_HDR_SIZE + (uint64_t)r.meta_len + r.value_len == b->data_end)
            return last_bad_view + r.value_len + 1ull;
    }
    char name[64];
    seg_path(wal, b->seg->id, name, sizeof(name));
    wal_log(wal, "%s/%s: stream %u: the run at byte %" PRIu64 " ends in quarantined records whose lengths nothing proves: "
                 "its byte view is taken at its least (%" PRIu64 " bytes)",
            wal->dir, name, b->stream_no, b->file_off, view_min);
    return view_min;
}

/* Verifies the unsealed run bi of stream s record by record; sets count, data_end,
 * byte_len, ...
 * Above the run's durable frontier the first record that fails ends the run (a torn tail,
 * cut). Below it every record is kept: one that fails its checks is quarantined, and the
 * next is found through its index slot, or, after the last durable record, at the
 * frontier's data_end (docs/format.md, "Validity rule"). */
/* A clean frontier (FRONTIER_CLEAN, frontier.c) is trusted as a seal is: its count records
 * are not read, once its last record and the run's first prove themselves where it says
 * (slot and header agree, inside the run, the crc of the last, its end at data_end, the
 * first at byte 1024 with the run's first gid). Sets where the walk goes on; 0, or -1 when
 * they do not prove themselves (the run is then verified from its first record). */
static int trust_frontier(walfs_t *wal, block_t *b, uint64_t *pos, uint64_t *view, uint64_t *prev,
                          int64_t *last_ts, uint32_t *batch_left)
{
    const uint64_t fc = b->durable_count, limit = b->run_size - fc * SLOT_SIZE;
    slot_t first, last;
    slot_get(b, 0, &first);
    slot_get(b, fc - 1, &last);
    if (first.pos != BLK_DATA_OFF || first.gid_delta != 0 || first.view_delta != 0 || last.pos < BLK_DATA_OFF ||
        (uint64_t)last.pos + REC_HDR_SIZE > limit || BLK_DATA_OFF + REC_HDR_SIZE > limit)
        return -1;
    rec_hdr_t r0, r;
    fmt_rec_parse(run_ptr(b, BLK_DATA_OFF), &r0);
    const uint8_t *p = run_ptr(b, last.pos);
    fmt_rec_parse(p, &r);
    if (r0.gid != b->first_gid || r0.stream_no != b->stream_no || r.stream_no != b->stream_no ||
        r.gid != b->first_gid + last.gid_delta || (fc > 1 && last.gid_delta == 0) ||
        (uint64_t)last.pos + REC_HDR_SIZE + r.meta_len + r.value_len != b->durable_end ||
        fmt_rec_check(p, wal->crc_seed, &r) != 0)
        return -1;
    b->first_ts = r0.ts;
    *pos = b->durable_end;
    *view = last.view_delta + r.value_len + 1ull;
    *prev = r.gid;
    *last_ts = r.ts;
    *batch_left = r.batch_left;
    return 0;
}

static int verify_run(walfs_t *wal, stream_t *s, size_t bi, uint32_t *last_batch_left)
{
    block_t *b = s->blocks[bi];
    const uint64_t fc = b->durable_count;
    uint64_t pos = BLK_DATA_OFF, i = 0, view = 0;
    uint64_t prev = 0;            /* gid of the last record that proved itself */
    int64_t last_ts = 0;
    uint32_t batch_left = 0;
    if (b->frontier_clean) {
        if (trust_frontier(wal, b, &pos, &view, &prev, &last_ts, &batch_left) == 0) {
            i = fc;
        } else {
            char name[64];
            seg_path(wal, b->seg->id, name, sizeof(name));
            wal_log(wal, "%s/%s: stream %u: the run at byte %" PRIu64 " does not end where its durable frontier says "
                         "(%" PRIu64 " records): every record is verified",
                    wal->dir, name, b->stream_no, b->file_off, fc);
        }
    }
    const uint64_t first_checked = i;
    int trusted = 1;              /* pos is proved: where record i starts (records are packed) */
    int view_known = 1;           /* view is proved: record i's view position; else at least that */
    uint64_t n_quar = 0, n_failed = 0; /* quarantined records; those of them that prove nothing */
    uint64_t last_bad_view = UINT64_MAX, last_bad_pos = 0;
    qlog_t ql = {0, 0, 0, 0};
    for (;;) {
        if (!trusted && i == fc) {
            pos = b->durable_end; /* the frontier's data_end: where record fc starts */
            trusted = 1;
        }
        if (view_known) { /* and so trusted: the path of every record of an undamaged run */
            /* The record at pos, as every record is checked: it fits, names the run's stream,
             * its gid rises (the subtraction wraps below first_gid), its slot matches it,
             * its crc. */
            int ok = 0;
            rec_hdr_t r;
            const uint8_t *p = run_ptr(b, pos);
            uint64_t end = 0;
            if (pos + REC_HDR_SIZE + (i + 1) * SLOT_SIZE <= b->run_size) {
                fmt_rec_parse(p, &r);
                end = pos + REC_HDR_SIZE + (uint64_t)r.meta_len + r.value_len;
                if (end + (i + 1) * SLOT_SIZE <= b->run_size && r.stream_no == b->stream_no &&
                    (i == 0 ? r.gid == b->first_gid : r.gid > prev) && r.gid - b->first_gid <= UINT32_MAX) {
                    slot_t sl;
                    slot_get(b, i, &sl);
                    ok = sl.pos == pos && sl.gid_delta == r.gid - b->first_gid && sl.view_delta == view &&
                         fmt_rec_check(p, wal->crc_seed, &r) == 0;
                }
            }
            if (ok) {
                if (i == n_failed) b->first_ts = r.ts; /* the first record that tells a time */
                last_ts = r.ts;
                prev = r.gid;
                batch_left = r.batch_left;
                view += r.value_len + 1ull;
                pos = end;
                i++;
                continue;
            }
            /* Above the frontier the first record that fails ends the run (a torn tail). */
            if (i >= fc) break;
        } else if (i >= fc) {
            /* The first record above the frontier after quarantined ones, at the frontier's
             * data_end: checked the same way, its slot's view position at least the least
             * the quarantined records leave. */
            rec_hdr_t r;
            slot_t sl;
            if (pos + REC_HDR_SIZE + (i + 1) * SLOT_SIZE > b->run_size ||
                !proves_itself(wal, b, i, pos, b->run_size - (i + 1) * SLOT_SIZE, prev, &r))
                break;
            slot_get(b, i, &sl);
            if (sl.pos != pos || sl.gid_delta != r.gid - b->first_gid || sl.view_delta < view) break;
            if (i == n_failed) b->first_ts = r.ts;
            if (ql.n) qlog_flush(wal, s, b, &ql);
            view = sl.view_delta + r.value_len + 1ull;
            view_known = 1;
            last_ts = r.ts;
            prev = r.gid;
            batch_left = r.batch_left;
            pos += REC_HDR_SIZE + (uint64_t)r.meta_len + r.value_len;
            i++;
            continue;
        }
        /* Below the frontier: the record is durable; it is kept, good or quarantined. */
        slot_t sl;
        slot_get(b, i, &sl);
        uint64_t at = trusted ? pos : sl.pos;
        rec_hdr_t r;
        if ((trusted || sl.pos >= pos + REC_HDR_SIZE) && proves_itself(wal, b, i, at, b->durable_end, prev, &r) &&
            (trusted || (sl.gid_delta == r.gid - b->first_gid && sl.view_delta >= view))) {
            /* Found through its slot (slot and record agree: a good record), or at its
             * packed place while its slot says otherwise: reads go through the slot, so
             * that record is refused. Either way its lengths are proved. */
            if (!trusted) {
                view = sl.view_delta;
                view_known = 1;
                if (ql.n) qlog_flush(wal, s, b, &ql);
            } else {
                int rc = quarantine(wal, s, b, i, at, Q_SLOT, &ql);
                if (rc) return rc;
                n_quar++;
            }
            if (i == n_failed) b->first_ts = r.ts;
            last_ts = r.ts;
            prev = r.gid;
            batch_left = r.batch_left;
            view += r.value_len + 1ull;
            pos = at + REC_HDR_SIZE + (uint64_t)r.meta_len + r.value_len;
            trusted = 1;
            i++;
            continue;
        }
        /* Damaged. Its batch_left is not looked at: the frontier counts whole appends
         * (frontier.c takes published counts), so the last durable record ends one. */
        int rc = quarantine(wal, s, b, i, at, Q_FAILS, &ql);
        if (rc) return rc;
        n_quar++;
        n_failed++;
        if (view_known && sl.view_delta == view) {
            last_bad_view = view;
            last_bad_pos = at;
        } else {
            last_bad_view = UINT64_MAX;
        }
        if (trusted) pos = at; /* the next record starts at least one header after this one */
        trusted = 0;
        view_known = 0;
        view += 1; /* at least its '\n' */
        batch_left = 0;
        i++;
    }
    qlog_flush(wal, s, b, &ql);
    wal->report.verified_records += i - first_checked - n_quar;
    *last_batch_left = batch_left;
    if (i > n_failed) {
        b->last_gid = prev;
        b->last_ts = last_ts;
    } else if (i > 0) {
        b->last_gid = b->first_gid; /* all quarantined: record 0's gid, by the open header */
    }
    b->count = i;
    b->data_end = pos;
    b->byte_len = view_known ? view : end_view(wal, s, bi, b, view, last_bad_view, last_bad_pos);
    /* Bytes where the next record would start: a torn or damaged record, unless zero. */
    if (clear_tail(wal, b, 0)) {
        b->dirty_tail = 1;
        wal->report.cut_records++;
        wal_log(wal, "stream %u: record %" PRIu64 " at the tail, above the durable frontier, is torn: cut",
                b->stream_no, b->first_offset + i);
    }
    return 0;
}

static void seg_name_of(const walfs_t *wal, const block_t *b, char *name, size_t len)
{
    seg_path(wal, b->seg->id, name, len);
}

/* Record idx of run b: its header, once its slot and header are inside the run and agree
 * (a sealed run's slots are not covered by the seal's crc). -EUCLEAN, reported, if not. */
static int header_at(walfs_t *wal, const block_t *b, uint64_t idx, rec_hdr_t *r, uint64_t *pos)
{
    const uint8_t *p;
    if (record_locate(b, idx, &p, r)) {
        char name[64];
        seg_name_of(wal, b, name, sizeof(name));
        wal_damage(wal, "%s/%s: run at byte %" PRIu64 " (stream %u): the index slot or header of the record at offset %" PRIu64
                        " is out of bounds or inconsistent",
                   wal->dir, name, b->file_off, b->stream_no, b->first_offset + idx);
        return -EUCLEAN;
    }
    *pos = (uint64_t)(p - run_ptr(b, 0));
    return 0;
}

/* Shortens run b to `keep` records (keep < count). */
static int below_frontier(walfs_t *wal, const block_t *b, uint64_t keep)
{
    if (keep >= b->durable_count) return 0;
    char name[64];
    seg_path(wal, b->seg->id, name, sizeof(name));
    wal_damage(wal, "%s/%s: stream %u: records from offset %" PRIu64 " would be cut but lie below the run's durable "
                    "frontier (%" PRIu64 " records synced): damaged",
               wal->dir, name, b->stream_no, b->first_offset + keep, b->durable_count);
    return -EUCLEAN;
}

static int shorten(walfs_t *wal, block_t *b, uint64_t keep)
{
    if (below_frontier(wal, b, keep)) return -EUCLEAN;
    uint64_t end = BLK_DATA_OFF, view = 0;
    if (keep > 0 && block_quarantined(b, keep - 1)) {
        /* Its lengths are not to be trusted: the first record cut (read and kept apart
         * by the walk back, so it is located) starts where it ends. */
        const uint8_t *p;
        rec_hdr_t r;
        if (record_locate(b, keep, &p, &r)) return header_at(wal, b, keep, &r, &end);
        slot_t sl;
        slot_get(b, keep, &sl);
        end = sl.pos;
        view = sl.view_delta;
        /* Bounds from above, which is what they are used for (the next gid, appends' times). */
        b->last_gid = r.gid - 1;
        b->last_ts = r.ts;
    } else if (keep > 0) {
        rec_hdr_t r;
        uint64_t pos;
        int rc = header_at(wal, b, keep - 1, &r, &pos);
        if (rc) return rc;
        slot_t sl;
        slot_get(b, keep - 1, &sl);
        end = pos + REC_HDR_SIZE + r.meta_len + r.value_len;
        view = sl.view_delta + r.value_len + 1ull;
        b->last_gid = r.gid;
        b->last_ts = r.ts;
    }
    wal->report.cut_records += b->count - keep;
    wal->report.cut_bytes += b->data_end - end;
    b->count = keep;
    b->data_end = end;
    b->byte_len = view;
    clear_tail(wal, b, 1);
    return 0;
}

/* Forgets a run entirely (its headers are zeroed by the caller in writer mode). */
static int drop_header(walfs_t *wal, block_t *b)
{
    if (below_frontier(wal, b, 0)) return -EUCLEAN;
    wal->report.cut_records += b->count;
    wal->report.cut_bytes += b->data_end - BLK_DATA_OFF;
    wal->report.freed_blocks += b->n_blocks;
    if (wal->opt.read_only) return 0;
    int rc = seg_zero(wal, b->seg, b->file_off, BLK_HDR_SIZE);
    if (!rc) rc = seg_zero(wal, b->seg, b->file_off + BLK_SEAL_OFF, BLK_HDR_SIZE);
    return rc;
}

static int unseal(walfs_t *wal, block_t *b)
{
    b->sealed = 0;
    if (wal->opt.read_only) return 0;
    return seg_zero(wal, b->seg, b->file_off + BLK_SEAL_OFF, BLK_HDR_SIZE);
}

/* Catalog v2: every stream's highest FLOOR (a durable-end mark, catalog.c) is an offset
 * below which every record above the low watermark was durable. A stream whose records
 * would end below it lost durable records (a deleted segment file, a lost run header, a
 * damaged record above a lagging frontier): damage, reported before anything is cut. */
static int short_of_floor(walfs_t *wal, const stream_t *s, uint64_t end)
{
    uint64_t floor = s->no < wal->n_check_floors ? wal->check_floors[s->no] : 0;
    if (floor <= s->low_offset || end >= floor) return 0;
    wal_damage(wal, "%s: stream %u (%.*s) would end at offset %" PRIu64 " but streams.cat proves offsets up to %" PRIu64
                    " durable (a FLOOR entry): its records from offset %" PRIu64 " are missing (deleted segment file or "
                    "lost run header?): damaged",
               wal->dir, s->no, (int)s->name_len, s->name, end, floor, end > s->low_offset ? end : s->low_offset);
    return -EUCLEAN;
}

static uint64_t end_of(const block_t *b) { return b->first_offset + b->count; }

/* The batch_left of the last record of sealed run b, in which the stream's records end. The
 * seal proves the run's records durable and whole appends up to its last (a run is sealed
 * once the append that filled it is durable), so the open reads no other record of it: a
 * last record that does not fit, or fails its crc when its batch_left would cut an append,
 * is quarantined and ends an append. The last records of sealed runs that later runs follow
 * are not read (their batch_left says nothing of the stream's end): damage there is found
 * by the read that meets it and by fsck, as anywhere else in a sealed run. */
static int sealed_end(walfs_t *wal, stream_t *s, block_t *b, uint32_t *batch_left)
{
    const uint8_t *p;
    rec_hdr_t r;
    slot_t sl;
    *batch_left = 0;
    if (record_locate(b, b->count - 1, &p, &r)) {
        slot_get(b, b->count - 1, &sl);
        return quarantine(wal, s, b, b->count - 1, sl.pos, Q_UNFIT, NULL);
    }
    if (r.batch_left && fmt_rec_check(p, wal->crc_seed, &r)) {
        /* An unfinished append would be cut on its word: it must prove itself. */
        slot_get(b, b->count - 1, &sl);
        return quarantine(wal, s, b, b->count - 1, sl.pos, Q_FAILS, NULL);
    }
    *batch_left = r.batch_left;
    return 0;
}

/* Orders a stream's runs, checks that they continue each other, and cuts the tail. */
static int settle_stream(walfs_t *wal, stream_t *s)
{
    int rc = 0;
    if (!s->n_blocks) return short_of_floor(wal, s, 0);
    qsort(s->blocks, s->n_blocks, sizeof(*s->blocks), cmp_block);
    size_t keep = s->n_blocks;
    uint32_t last_batch_left = 0;
    block_t *sealed_last = NULL; /* the sealed run the stream's records end in, if any */
    /* The first run starts at or below the low watermark (reclaim only removes runs wholly
     * below it); starting above it means a lost run at the front. */
    uint64_t expected = s->blocks[0]->first_offset < s->low_offset ? s->blocks[0]->first_offset : s->low_offset;
    if (s->next_offset > expected && s->next_offset <= s->blocks[0]->first_offset) expected = s->next_offset;
    for (size_t i = 0; i < s->n_blocks; i++) {
        block_t *b = s->blocks[i];
        /* Reclamation leaves holes below the low watermark: those are expected. */
        if (b->first_offset > expected && b->first_offset <= s->low_offset) expected = b->first_offset;
        if (b->first_offset != expected || (i > 0 && b->first_gid <= s->blocks[i - 1]->last_gid)) {
            /* A hole or an overlap: a crash explains it only if nothing after it is sealed. */
            for (size_t j = i; j < s->n_blocks; j++) {
                if (s->blocks[j]->sealed) {
                    wal_damage(wal, "%s: stream %u (%.*s): run at offset %" PRIu64 " does not follow offset %" PRIu64
                                    " but later data is sealed: damaged",
                               wal->dir, s->no, (int)s->name_len, s->name, b->first_offset, expected);
                    return -EUCLEAN;
                }
            }
            keep = i;
            break;
        }
        if (!b->sealed) {
            uint32_t bl;
            if ((rc = verify_run(wal, s, i, &bl))) return rc;
            if (b->count) { /* an empty run says nothing of the batch */
                last_batch_left = bl;
                sealed_last = NULL;
            }
            /* A short unsealed run ends the stream: the runs after it did not continue it. */
            expected = b->first_offset + b->count;
            if (i + 1 < s->n_blocks && s->blocks[i + 1]->first_offset != expected &&
                !(s->blocks[i + 1]->first_offset > expected && s->blocks[i + 1]->first_offset <= s->low_offset)) {
                keep = i + 1;
                for (size_t j = i + 1; j < s->n_blocks; j++)
                    if (s->blocks[j]->sealed) {
                        wal_damage(wal, "%s: stream %u: unsealed run ends at offset %" PRIu64 " before sealed data: damaged",
                                   wal->dir, s->no, expected);
                        return -EUCLEAN;
                    }
                break;
            }
        } else {
            /* Its last record's batch_left matters only if the stream ends in this run:
             * read after the walk (sealed_end), not for every sealed run. */
            sealed_last = b;
            last_batch_left = 0;
            expected = b->first_offset + b->count;
        }
    }
    if (sealed_last && (rc = sealed_end(wal, s, sealed_last, &last_batch_left))) return rc;
    if ((rc = short_of_floor(wal, s, keep ? end_of(s->blocks[keep - 1]) : 0))) return rc;
    for (size_t j = keep; j < s->n_blocks; j++) {
        if ((rc = drop_header(wal, s->blocks[j]))) return rc;
        pthread_mutex_lock(&wal->lock);
        release_run(wal, s->blocks[j]);
        pthread_mutex_unlock(&wal->lock);
    }
    s->n_blocks = keep;

    /* An append that did not finish is cut back to the previous complete one. */
    while (last_batch_left > 0 && s->n_blocks > 0) {
        block_t *b = s->blocks[s->n_blocks - 1];
        uint64_t k = b->count;
        int found = 0;
        while (k > 0) {
            /* A quarantined record lies below a frontier or a seal: durable, never cut. Its
             * batch_left cannot be read, and both mark whole appends: an append ends there. */
            if (block_quarantined(b, k - 1)) {
                found = 1;
                break;
            }
            const uint8_t *p;
            rec_hdr_t r;
            /* A sealed run's records were not read at open (an unsealed run's were): one
             * that does not fit, or whose batch_left would cut durable records but that
             * fails its crc, is quarantined like a damaged record below a frontier. */
            if (record_locate(b, k - 1, &p, &r) || (r.batch_left && fmt_rec_check(p, wal->crc_seed, &r))) {
                slot_t sl;
                slot_get(b, k - 1, &sl);
                if ((rc = quarantine(wal, s, b, k - 1, sl.pos, Q_FAILS, NULL))) return rc;
                found = 1;
                break;
            }
            if (r.batch_left == 0) {
                found = 1;
                break;
            }
            k--;
        }
        if (k < b->count) {
            if ((rc = short_of_floor(wal, s, b->first_offset + k))) return rc;
            if (b->sealed && (rc = unseal(wal, b))) return rc;
            if ((rc = shorten(wal, b, k))) return rc;
        }
        if (found) break;
        if (b->count == 0 && s->n_blocks > 1) {
            /* Empty now: forget it and look in the run before. */
            if ((rc = drop_header(wal, b))) return rc;
            pthread_mutex_lock(&wal->lock);
            release_run(wal, b);
            pthread_mutex_unlock(&wal->lock);
            s->n_blocks--;
        } else {
            break;
        }
    }

    if (!s->n_blocks) return short_of_floor(wal, s, 0);
    block_t *last = s->blocks[s->n_blocks - 1];
    if ((rc = short_of_floor(wal, s, end_of(last)))) return rc;
    /* Judged whole: now the torn tails verify_run found may be cleared. */
    for (size_t i = 0; i < s->n_blocks; i++)
        if (s->blocks[i]->dirty_tail) clear_tail(wal, s->blocks[i], 1);
    s->next_offset = last->first_offset + last->count > s->next_offset ? last->first_offset + last->count
                                                                        : s->next_offset;
    uint64_t nb = last->first_byte + last->byte_len;
    if (nb > s->next_byte) s->next_byte = nb;
    s->last_ts = last->last_ts;
    for (size_t i = 0; i < s->n_blocks; i++) {
        block_t *b = s->blocks[i];
        wal->report.records += b->count;
        if (b->count && b->last_gid >= wal->next_gid) wal->next_gid = b->last_gid + 1;
        /* Full unsealed runs get their seal after the sync that ends recovery. */
        if (i + 1 < s->n_blocks) {
            b->full = 1;
            if (!b->sealed && !wal->opt.read_only) seal_later(wal, b, 0);
        }
        if (b->sealed) b->full = 1;
    }
    /* The open run's records this open verified (above its frontier, or all of them under
     * a frontier that is not clean: an older writer's) get a clean frontier from the sync
     * that ends recovery, so that the next open trusts them: their file is marked dirty,
     * for that sync to make them durable first (after a SIGKILL they may be in the page
     * cache only). A run with quarantined records keeps verifying at every open. */
    if (!wal->opt.read_only && !last->sealed && !last->n_quar && last->count &&
        (last->count > last->frontier_count || !last->frontier_clean)) {
        last->frontier_count = 0;
        atomic_store(&last->seg->dirty, 1);
    }
    return 0;
}

/* settle_stream, and a line naming the stream and where it now ends when its tail was cut
 * (the totals are in the open's summary line: walfs/local_engine.py). */
static int settle_stream_noted(walfs_t *wal, stream_t *s)
{
    uint64_t records = wal->report.cut_records, bytes = wal->report.cut_bytes;
    int rc = settle_stream(wal, s);
    if (!rc && (wal->report.cut_records > records || wal->report.cut_bytes > bytes))
        wal_log(wal, "stream %u (%.*s, partition %u): cut %" PRIu64 " torn or unfinished records (%" PRIu64
                     " bytes) from its tail: it ends at offset %" PRIu64,
                s->no, (int)s->name_len, s->name, s->partition, wal->report.cut_records - records,
                wal->report.cut_bytes - bytes, s->next_offset);
    return rc;
}

/* Recovery reads one header page per block (three per run). On a preallocated file most
 * blocks were never written, and the kernel's readahead would fill a large folio of zeros
 * around each of those pages: 0.3 s of memset for a fresh 1 GiB segment. So the scans
 * read the mapping without readahead; readers get it back afterwards. Advice only: a
 * failed madvise changes nothing but the speed. */
static void scan_advice(const segment_t *seg, int advice)
{
    (void)madvise((void *)seg->map, seg->size, advice);
}

static int scan_blocks(walfs_t *wal, segment_t *seg);

static int scan_segment(walfs_t *wal, segment_t *seg)
{
    scan_advice(seg, MADV_RANDOM);
    int rc = scan_blocks(wal, seg);
    scan_advice(seg, MADV_NORMAL);
    for (uint32_t i = 0; !rc && i < seg->n_blocks; i++)
        if (seg->carves[i]) carve_advise(wal, seg, i); /* carved blocks stay without readahead */
    return rc;
}

/* 1 if seal or frontier header x names the run whose open header is h: the same blocks,
 * stream, first offset and (a small run) size, slot, carve and original. */
static int names_run(const blk_hdr_t *x, const blk_hdr_t *h)
{
    return x->n_blocks == h->n_blocks && x->stream_no == h->stream_no && x->first_offset == h->first_offset &&
           x->run_size == h->run_size && x->slot == h->slot && x->src_seg == h->src_seg && x->carve_id == h->carve_id;
}

/* 1 if count records ending at data_end fit run b with their index slots. Trusted on a
 * header's crc, a figure must still fit: a crc proves walfs wrote the header, not that
 * nothing wrote nonsense into it. */
static int figures_fit(const block_t *b, uint64_t count, uint64_t data_end)
{
    uint64_t max_count = (b->run_size - BLK_DATA_OFF) / (REC_HDR_SIZE + SLOT_SIZE);
    return count <= max_count && data_end >= BLK_DATA_OFF + count * REC_HDR_SIZE &&
           data_end <= b->run_size - count * SLOT_SIZE;
}

/* Logs that the header of kind `what` of the run at byte off of seg holds figures that do
 * not fit it; -EUCLEAN. */
static int misfit(walfs_t *wal, const segment_t *seg, uint64_t off, uint32_t stream_no, const char *what)
{
    char name[64];
    seg_path(wal, seg->id, name, sizeof(name));
    wal_damage(wal, "%s/%s: %s of the run at byte %" PRIu64 " (stream %u) does not fit the run", wal->dir, name, what,
               off, stream_no);
    return -EUCLEAN;
}

/* The header area of a run (its open, carve, frontier and seal headers: the bytes below
 * BLK_SEAL_OFF + BLK_HDR_SIZE), copied out of the mapping in one go, so that what is parsed
 * under scan_lock never touches the mapping (a SIGBUS there would leave the lock held).
 * Through the mapping, not by pread: a page fault on a cached file maps the pages around it
 * too (the kernel's fault-around), so the next small runs' headers cost no call at all
 * (measured: pread made the open of 100,000 one-record topics a third slower). */
#define RUN_HDR_AREA (BLK_SEAL_OFF + BLK_HDR_SIZE)
static void read_hdr_area(const segment_t *seg, uint64_t off, uint8_t *area)
{
    memcpy(area, seg->map + off, RUN_HDR_AREA);
}

/* Segments are scanned in parallel (scan_all): what a scan shares with the other threads (the
 * stream table and its runs, the report, the first damage message) is changed under it. */
static pthread_mutex_t scan_lock = PTHREAD_MUTEX_INITIALIZER;

/* The run whose valid open header h lies at file offset off of seg (block i; slot of a
 * carved block for a small run): its seal and frontier headers are read (they must name
 * the same run), and it joins its stream. */
static int scan_run_locked(walfs_t *wal, segment_t *seg, uint32_t i, uint64_t off, const blk_hdr_t *h,
                           const uint8_t *area);

static int scan_run(walfs_t *wal, segment_t *seg, uint32_t i, uint64_t off, const blk_hdr_t *h, const uint8_t *area)
{
    pthread_mutex_lock(&scan_lock);
    int rc = scan_run_locked(wal, seg, i, off, h, area);
    pthread_mutex_unlock(&scan_lock);
    return rc;
}

static int scan_run_locked(walfs_t *wal, segment_t *seg, uint32_t i, uint64_t off, const blk_hdr_t *h,
                           const uint8_t *area)
{
    stream_t *s = stream_get(wal, h->stream_no);
    /* A read-only open may meet a run of a stream a live writer defined after the
     * catalog was read: read the catalog's new entries once more. */
    if (!s && wal->opt.read_only && cat_refresh(wal) == 0) s = stream_get(wal, h->stream_no);
    if (!s) {
        /* A DEFINE is durable before its stream can allocate a run, and stream numbers
         * are never reused or forgotten (deleted streams keep theirs): a run naming
         * a stream the catalog does not define means the catalog lost entries. */
        char name[64];
        seg_path(wal, seg->id, name, sizeof(name));
        wal_damage(wal, "%s/%s: run at byte %" PRIu64 " belongs to stream %u, which streams.cat does not define "
                        "(%zu streams): the catalog lost entries (cut short?)",
                   wal->dir, name, off, h->stream_no, atomic_load(&wal->n_streams));
        return -EUCLEAN;
    }
    block_t *b = calloc(1, sizeof(*b));
    if (!b) return -ENOMEM;
    b->seg = seg;
    b->index = i;
    b->n_blocks = h->n_blocks;
    b->slot = h->slot;
    b->src_seg = h->src_seg;
    b->stream_no = h->stream_no;
    b->run_size = h->n_blocks ? (uint64_t)h->n_blocks * wal->opt.block_size : h->run_size;
    b->file_off = off;
    b->first_offset = h->first_offset;
    b->first_byte = h->first_byte;
    b->first_gid = h->first_gid;
    b->data_end = BLK_DATA_OFF;
    blk_hdr_t sh;
    if (fmt_blk_parse(area + BLK_SEAL_OFF, wal, seg->id, i, BLK_KIND_SEAL, &sh) == 0 && names_run(&sh, h) &&
        sh.count > 0) {
        if (!figures_fit(b, sh.count, sh.data_end) || sh.last_gid < h->first_gid + sh.count - 1 ||
            sh.last_gid - h->first_gid > UINT32_MAX || sh.byte_len < sh.count) {
            free(b);
            return misfit(wal, seg, off, h->stream_no, "seal");
        }
        b->sealed = 1;
        b->count = sh.count;
        b->last_gid = sh.last_gid;
        b->data_end = sh.data_end;
        b->byte_len = sh.byte_len;
        b->first_ts = sh.first_ts;
        b->last_ts = sh.last_ts;
    }
    blk_hdr_t fh;
    /* A frontier of this very run (a stale one of an earlier user of these blocks has
     * another first_gid). Its figures must fit the run like a seal's. */
    if (!b->sealed && fmt_blk_parse(area + BLK_FRONTIER_OFF, wal, seg->id, i, BLK_KIND_FRONTIER, &fh) == 0 &&
        names_run(&fh, h) && fh.first_gid == h->first_gid) {
        if (!figures_fit(b, fh.count, fh.data_end)) {
            free(b);
            return misfit(wal, seg, off, h->stream_no, "durable frontier");
        }
        b->durable_count = b->frontier_count = fh.count;
        b->durable_end = fh.data_end;
        b->frontier_clean = fh.count > 0 && (fh.flags & FRONTIER_CLEAN);
    }
    int rc = stream_add_block(s, b);
    if (rc) {
        free(b);
        return rc;
    }
    if (h->n_blocks) {
        seg->block_state[i] = BS_HEAD;
        for (uint32_t k = 1; k < h->n_blocks; k++) seg->block_state[i + k] = BS_TAIL;
    } else {
        carve_use_slot(seg, i, h->slot);
    }
    wal->report.blocks++;
    return 0;
}

/* 1 if segment id is one this open uses (opened, not reclaimed). wal->segs is in id order. */
static int seg_opened(const walfs_t *wal, uint64_t id)
{
    size_t lo = 0, hi = wal->n_segs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (wal->segs[mid]->id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < wal->n_segs && wal->segs[lo]->id == id;
}

/* Slot k of carved block i of seg (class class_size, carve carve_id, at file offset off): a
 * run if its open header proves itself (crc, uuid, segment, block, slot, run size, carve:
 * format.c "Small runs"). */
static int probe_slot(walfs_t *wal, segment_t *seg, uint32_t i, uint32_t class_size, uint64_t carve_id, uint32_t k,
                      uint64_t off)
{
    blk_hdr_t h;
    uint8_t area[RUN_HDR_AREA];
    read_hdr_area(seg, off, area);
    int rc;
    if (fmt_blk_parse(area, wal, seg->id, i, BLK_KIND_OPEN, &h) != 0 || h.version != RUN_VERSION_SMALL ||
        h.run_size != class_size || h.slot != k || h.carve_id != carve_id)
        return 0;
    if (h.src_seg && seg_opened(wal, h.src_seg)) {
        /* A cleaner's copy whose original's segment was never reclaimed (no SEGMENT_GONE:
         * reclaim.c writes it only once the copies are durable): the original is in
         * force, the copy is forgotten. */
        char name[64];
        seg_path(wal, seg->id, name, sizeof(name));
        wal_log(wal, "%s/%s: block %u slot %u: a copy of a run of stream %u whose original is still in force "
                     "(its segment was not reclaimed): %s", wal->dir, name, i, k, h.stream_no,
                wal->opt.read_only ? "ignored" : "dropped");
        if (!wal->opt.read_only &&
            ((rc = seg_zero(wal, seg, off, BLK_HDR_SIZE)) || (rc = seg_zero(wal, seg, off + BLK_SEAL_OFF, BLK_HDR_SIZE))))
            return rc;
        return 0;
    }
    return scan_run(wal, seg, i, off, &h, area);
}

/* cachestat(2) (Linux 6.5; the same number on every architecture), declared here for
 * headers that predate it. */
struct walfs_cachestat_range {
    uint64_t off, len;
};
struct walfs_cachestat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
#define WALFS_NR_CACHESTAT 451

/* Carved block i of seg (from file offset base, len bytes), by what the file system says was
 * ever written to it: only the slots whose open header lies in an extent that is not
 * UNWRITTEN (FIEMAP) are probed. A slot never written reads as zeros and holds no run; its
 * extent stays unwritten whatever the page cache holds, where SEEK_DATA reports a cached
 * page of zeros as data (ext4: a writer's mapping pulls a block's never-written slots into
 * the cache around the page it writes, and every warm open would then probe them all).
 * Written pages not yet written back are in unwritten extents too: so this is used only
 * when no page of the block is dirty or under writeback (cachestat, asked first: a page
 * written back since is then in a written extent, ext4 and xfs converting the extent
 * before the writeback ends), as after a clean close (its last sync). Returns the first
 * slot it did not judge (n_slots when done, 0 when the file system cannot tell: no
 * cachestat or FIEMAP, a dirty page; the caller probes the slots from there that SEEK_DATA
 * does not skip), or a probe's error. */
static int64_t scan_carved_written(walfs_t *wal, segment_t *seg, uint32_t i, uint32_t class_size,
                                   uint64_t carve_id, uint64_t base, uint64_t len)
{
    struct walfs_cachestat_range cr = {base, len};
    struct walfs_cachestat cs;
    if (syscall(WALFS_NR_CACHESTAT, seg->fd, &cr, &cs, 0) != 0 || cs.nr_dirty || cs.nr_writeback) return 0;
    enum { N_EXT = 64 };
    union {
        struct fiemap fm;
        uint8_t buf[sizeof(struct fiemap) + N_EXT * sizeof(struct fiemap_extent)];
    } u;
    uint32_t next_k = 0, n_slots = (uint32_t)(len / class_size);
    uint64_t at = base, end = base + len;
    while (at < end && next_k < n_slots) {
        memset(&u.fm, 0, sizeof(u.fm));
        u.fm.fm_start = at;
        u.fm.fm_length = end - at;
        u.fm.fm_extent_count = N_EXT;
        if (ioctl(seg->fd, FS_IOC_FIEMAP, &u.fm) != 0) return next_k; /* the rest as the caller finds it */
        if (u.fm.fm_mapped_extents == 0) break;
        int last = 0;
        for (uint32_t e = 0; e < u.fm.fm_mapped_extents; e++) {
            const struct fiemap_extent *x = &u.fm.fm_extents[e];
            uint64_t lo = x->fe_logical, hi = x->fe_logical + x->fe_length;
            if (x->fe_flags & FIEMAP_EXTENT_LAST) last = 1;
            if (hi > at) at = hi;
            if (x->fe_flags & FIEMAP_EXTENT_UNWRITTEN || hi <= base || lo >= end) continue;
            /* Slots whose open header [slot, slot + BLK_HDR_SIZE) meets [lo, hi). */
            uint64_t from = lo > base + BLK_HDR_SIZE ? (lo - base - BLK_HDR_SIZE) / class_size + 1 : 0;
            uint64_t to = (hi - base + class_size - 1) / class_size;
            if (from < next_k) from = next_k;
            if (to > n_slots) to = n_slots;
            for (uint64_t k = from; k < to; k++) {
                int rc = probe_slot(wal, seg, i, class_size, carve_id, (uint32_t)k, base + k * class_size);
                if (rc) return rc;
            }
            if (to > next_k) next_k = (uint32_t)to;
        }
        if (last) break;
    }
    return n_slots;
}

/* Block i of seg, carved for class_size by carve carve_id: every slot whose open header
 * proves itself (crc, uuid, segment, block, slot, run size, carve: format.c "Small runs")
 * is a run. */
static int scan_carved(walfs_t *wal, segment_t *seg, uint32_t i, uint32_t class_size, uint64_t carve_id)
{
    int rc = carve_mark(wal, seg, i, class_size, carve_id);
    if (rc) return rc;
    uint64_t base = SEG_HDR_SIZE + (uint64_t)i * wal->opt.block_size;
    uint64_t end = base + wal->opt.block_size;
    uint32_t n_slots = wal->opt.block_size / class_size;
    int64_t from = scan_carved_written(wal, seg, i, class_size, carve_id, base, wal->opt.block_size);
    if (from < 0) return (int)from;
    uint64_t data_to = 0; /* bytes from the slot below here are known to hold data */
    for (uint32_t k = (uint32_t)from; k < n_slots; k++) {
        uint64_t off = base + (uint64_t)k * class_size;
        if (off >= data_to) {
            /* Slots never written are holes where the file system reports them (ext4 keeps
             * fallocate()d, unwritten extents as holes while the cache holds no page of
             * them): they read as zeros and hold no run. Skip them without touching the
             * mapping (a probe would put a zero page in the cache, and an open would map
             * thousands): one SEEK_DATA/SEEK_HOLE pair per range of data, not a page fault
             * per slot. Where holes are not reported (tmpfs keeps fallocate()d pages as
             * data), every slot is probed, as a failed lseek does. */
            off_t d = lseek(seg->fd, (off_t)off, SEEK_DATA);
            if (d < 0 && errno == ENXIO) break;
            if (d < 0) {
                data_to = end;
            } else {
                if ((uint64_t)d >= end) break;
                if ((uint64_t)d >= off + class_size) {
                    k = (uint32_t)(((uint64_t)d - base) / class_size) - 1; /* the loop steps to d's slot */
                    continue;
                }
                off_t hole = lseek(seg->fd, d, SEEK_HOLE);
                data_to = hole < 0 ? end : (uint64_t)hole;
            }
        }
        if ((rc = probe_slot(wal, seg, i, class_size, carve_id, k, off))) return rc;
    }
    return 0;
}

/* The first block at or after i that was reserved (holes of the sparse file, allocator.c,
 * hold no run and are not read: on tmpfs a read through a shared mapping would allocate
 * them), or seg->n_blocks when none is: one lseek(SEEK_DATA) skips every hole up to the
 * next reserved block. An lseek that fails otherwise answers i (the block is read). */
uint32_t seg_next_data_block(const walfs_t *wal, const segment_t *seg, uint32_t i)
{
    uint64_t off = SEG_HDR_SIZE + (uint64_t)i * wal->opt.block_size;
    off_t data = lseek(seg->fd, (off_t)off, SEEK_DATA);
    if (data < 0) return errno == ENXIO ? seg->n_blocks : i; /* ENXIO: no data at or after off */
    if ((uint64_t)data < off) return i;
    uint64_t at = ((uint64_t)data - SEG_HDR_SIZE) / wal->opt.block_size;
    return at < seg->n_blocks ? (uint32_t)at : seg->n_blocks;
}

static int scan_blocks(walfs_t *wal, segment_t *seg)
{
    uint32_t i = 0;
    while (i < seg->n_blocks) {
        uint64_t off = SEG_HDR_SIZE + (uint64_t)i * wal->opt.block_size;
        blk_hdr_t h, ch;
        int rc;
        uint32_t next = seg_next_data_block(wal, seg, i);
        if (next != i) {
            i = next;
            continue;
        }
        uint8_t area[RUN_HDR_AREA];
        read_hdr_area(seg, off, area);
        if (fmt_blk_parse(area + BLK_CARVE_OFF, wal, seg->id, i, BLK_KIND_CARVE, &ch) == 0 &&
            small_class(wal, ch.run_size)) {
            if ((rc = scan_carved(wal, seg, i, (uint32_t)ch.run_size, ch.carve_id))) return rc;
            i++;
            continue;
        }
        if (fmt_blk_parse(area, wal, seg->id, i, BLK_KIND_OPEN, &h) != 0) {
            i++;
            continue;
        }
        if (h.version == RUN_VERSION_SMALL) {
            /* Slot 0's small run, in a block whose carve header is damaged: the run's own
             * header proves the class and the carve (it is bound to this block, slot 0, its
             * size and its carve id; the two headers share a sector, allocator.c, so this is
             * damage, not a crash). A writer rewrites the carve header from it. */
            if (h.slot != 0 || !small_class(wal, h.run_size)) {
                i++;
                continue;
            }
            char name[64];
            seg_path(wal, seg->id, name, sizeof(name));
            wal_log(wal, "%s/%s: block %u: carve header damaged; its class (%" PRIu64 " bytes) is read from the run in "
                         "its first slot%s", wal->dir, name, i, h.run_size, wal->opt.read_only ? "" : ": rewritten");
            if (!wal->opt.read_only) {
                uint8_t hdr[BLK_HDR_SIZE];
                fmt_blk_carve(hdr, wal, seg->id, i, (uint32_t)h.run_size, h.carve_id);
                if (seg_pwrite(wal, seg, hdr, sizeof(hdr), off + BLK_CARVE_OFF) != 0)
                    wal_log(wal, "could not rewrite a carve header");
            }
            if ((rc = scan_carved(wal, seg, i, (uint32_t)h.run_size, h.carve_id))) return rc;
            i++;
            continue;
        }
        if (h.n_blocks == 0 || h.n_blocks > seg->n_blocks - i) {
            i++;
            continue;
        }
        if ((rc = scan_run(wal, seg, i, off, &h, area))) return rc;
        i += h.n_blocks;
    }
    return 0;
}

/* Every segment file scanned, by up to SCAN_THREADS threads, each taking the next file: a
 * scan is mostly the kernel's (page faults on each run's headers, FIEMAP and SEEK_DATA of
 * carved blocks), and segments share nothing but what scan_lock guards. Each thread reads
 * the mapping under its own guard. The first error stops the others at their next file;
 * which file's damage is reported first may then vary, not whether the open fails. */
#define SCAN_THREADS 4
typedef struct scan_pool {
    walfs_t *wal;
    atomic_size_t next;
    atomic_int rc;
} scan_pool_t;

static void *scan_worker(void *arg)
{
    scan_pool_t *p = arg;
    /* This thread's own guard (guard.c: thread-local): a disk error or a file cut short
     * under the mapping fails the open with -EIO, as recover's guard does on its thread. */
    GUARD_BEGIN(NULL, {
        pthread_mutex_lock(&scan_lock);
        wal_damage(p->wal, "%s: I/O error (SIGBUS) reading segment headers during recovery", p->wal->dir);
        pthread_mutex_unlock(&scan_lock);
        int none = 0;
        atomic_compare_exchange_strong(&p->rc, &none, -EIO);
        return NULL;
    });
    for (;;) {
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->wal->n_segs || atomic_load(&p->rc)) break;
        int rc = scan_segment(p->wal, p->wal->segs[k]);
        if (rc) {
            int none = 0;
            atomic_compare_exchange_strong(&p->rc, &none, rc);
            break;
        }
    }
    GUARD_END();
    return NULL;
}

static int scan_all(walfs_t *wal)
{
    scan_pool_t pool = {.wal = wal};
    atomic_init(&pool.next, 0);
    atomic_init(&pool.rc, 0);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t n = cpus > 1 ? (size_t)cpus : 1;
    if (n > SCAN_THREADS) n = SCAN_THREADS;
    if (n > wal->n_segs) n = wal->n_segs;
    pthread_t th[SCAN_THREADS];
    size_t started = 0;
    for (size_t t = 1; t < n; t++, started++)
        if (pthread_create(&th[started], NULL, scan_worker, &pool) != 0) break; /* fewer threads, same work */
    scan_worker(&pool);
    for (size_t t = 0; t < started; t++) pthread_join(th[t], NULL);
    return atomic_load(&pool.rc);
}

/* 1 if no block of the mapped segment starts with a valid run header or is carved. */
static int seg_no_runs(walfs_t *wal, const segment_t *seg)
{
    int none = 1;
    scan_advice(seg, MADV_RANDOM);
    for (uint32_t i = seg_next_data_block(wal, seg, 0); i < seg->n_blocks && none;
         i = seg_next_data_block(wal, seg, i + 1)) {
        blk_hdr_t h;
        const uint8_t *p = seg->map + SEG_HDR_SIZE + (uint64_t)i * wal->opt.block_size;
        if (fmt_blk_parse(p, wal, seg->id, i, BLK_KIND_OPEN, &h) == 0 ||
            fmt_blk_parse(p + BLK_CARVE_OFF, wal, seg->id, i, BLK_KIND_CARVE, &h) == 0)
            none = 0;
    }
    scan_advice(seg, MADV_NORMAL);
    return none;
}

/* Catalog v2 lists every segment file (segment.c: SEGMENT entry once the file is
 * durable, before any run is put in it; reclaim.c: SEGMENT_GONE before the unlink).
 * The listing's entry of `id`, after re-reading the catalog for a read-only open (a live
 * writer may have created or reclaimed files since this open read it). */
static cat_seg_t *listed(walfs_t *wal, uint64_t id)
{
    cat_seg_t *cs = cat_seg_find(wal, id);
    if ((!cs || !cs->gone) && wal->opt.read_only && cat_refresh(wal) == 0) cs = cat_seg_find(wal, id);
    return cs;
}

static int file_exists(const walfs_t *wal, uint64_t id)
{
    char name[64];
    seg_path(wal, id, name, sizeof(name));
    return faccessat(wal->dirfd, name, F_OK, 0) == 0;
}

/* Every segment the catalog lists as live must have been opened. */
static int check_listed_files(walfs_t *wal)
{
    /* A copy: listed() may re-read the catalog, which rebuilds wal->cat_segs. */
    size_t n = 0;
    uint64_t *ids = malloc((wal->n_cat_segs + 1) * sizeof(*ids));
    if (!ids) return -ENOMEM;
    for (size_t i = 0; i < wal->n_cat_segs; i++)
        if (!wal->cat_segs[i].gone) ids[n++] = wal->cat_segs[i].id;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        uint64_t id = ids[i];
        size_t lo = 0, hi = wal->n_segs; /* wal->segs is in id order (opened in order) */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (wal->segs[mid]->id < id) lo = mid + 1;
            else hi = mid;
        }
        if (lo < wal->n_segs && wal->segs[lo]->id == id) continue;
        /* Read-only beside a live writer: created after this open listed the directory
         * (then it exists), or reclaimed since (then SEGMENT_GONE precedes the unlink, and
         * a compaction after it lists only the files that are left). */
        if (wal->opt.read_only) {
            if (file_exists(wal, id)) continue;
            cat_seg_t *cs = listed(wal, id);
            if (!cs || cs->gone) continue;
        }
        char name[64];
        seg_path(wal, id, name, sizeof(name));
        wal_damage(wal, "%s/%s is missing: streams.cat lists it and no SEGMENT_GONE entry says it was reclaimed",
                   wal->dir, name);
        rc = -EUCLEAN;
    }
    free(ids);
    return rc;
}

static int recover_unguarded(walfs_t *wal)
{
    uint64_t *ids = NULL;
    size_t n = 0;
    int rc = list_segments(wal, &ids, &n);
    if (rc) return rc;
    int v2 = wal->cat_version >= 2, unlinked = 0;
    /* The marks this open checks are those read before the scan: a read-only open's
     * refreshes may bring marks of records appended after the scan (and streams defined
     * after it, which have none to check). */
    size_t ns0 = atomic_load(&wal->n_streams);
    if (v2 && ns0) {
        if (!(wal->check_floors = malloc(ns0 * sizeof(*wal->check_floors)))) {
            free(ids);
            return -ENOMEM;
        }
        wal->n_check_floors = ns0;
        for (size_t i = 0; i < ns0; i++) wal->check_floors[i] = stream_get(wal, (uint32_t)i)->floor_offset;
    }
    for (size_t i = 0; i < wal->n_cat_segs; i++)
        if (wal->cat_segs[i].id >= wal->next_seg_id) wal->next_seg_id = wal->cat_segs[i].id + 1;
    for (size_t k = 0; k < n; k++) {
        segment_t *seg;
        cat_seg_t *cs = v2 ? cat_seg_find(wal, ids[k]) : NULL;
        if (ids[k] >= wal->next_seg_id) wal->next_seg_id = ids[k] + 1;
        if (cs && cs->gone) {
            /* Reclamation wrote SEGMENT_GONE and was cut short before the unlink: every
             * run in it was below its stream's low watermark. Finish the job. */
            char name[64];
            seg_path(wal, ids[k], name, sizeof(name));
            if (!wal->opt.read_only) {
                wal_log(wal, "removing %s: reclaimed (SEGMENT_GONE) but not yet deleted", name);
                if (unlinkat(wal->dirfd, name, 0) == 0) unlinked = 1;
            }
            continue;
        }
        rc = seg_open(wal, ids[k], &seg);
        if (rc == -ENOENT) {
            /* Reclaimed by the writer between the listing and the open (read-only opens
             * run beside a live writer): its runs were all below their low watermarks. */
            rc = 0;
            continue;
        }
        if (rc == -ENODATA && k + 1 == n && !cs) {
            /* Only the newest file can be a creation cut short, and only a file that
             * provably never held data (seg_open: zero header, no run header) may go. */
            char name[64];
            seg_path(wal, ids[k], name, sizeof(name));
            wal_log(wal, "removing %s: its creation never finished and it holds no data", name);
            if (!wal->opt.read_only && unlinkat(wal->dirfd, name, 0) == 0) fsync_dir(wal->dirfd);
            if (ids[k] >= wal->next_seg_id) wal->next_seg_id = ids[k] + 1;
            rc = 0;
            continue;
        }
        if (rc == -ENODATA) {
            /* An older file, or one the catalog lists (its header was durable first). */
            char name[64];
            seg_path(wal, ids[k], name, sizeof(name));
            wal_damage(wal, "%s/%s: header is zero but %s: damaged", wal->dir, name,
                       cs ? "streams.cat lists the file" : "newer segments exist");
            rc = -EUCLEAN;
        }
        if (rc) break;
        if (v2 && !cs && !(cs = listed(wal, ids[k]))) {
            char name[64];
            seg_path(wal, ids[k], name, sizeof(name));
            if (k + 1 == n && seg_no_runs(wal, seg)) {
                /* Created and synced, but the crash came before its SEGMENT entry: no run
                 * was ever put in it (segment.c). */
                seg_free(seg);
                wal_log(wal, "removing %s: its creation never finished (not in streams.cat) and it holds no data", name);
                if (!wal->opt.read_only && unlinkat(wal->dirfd, name, 0) == 0) unlinked = 1;
                continue;
            }
            seg_free(seg);
            if (wal->opt.read_only && !file_exists(wal, ids[k])) continue; /* reclaimed meanwhile */
            wal_damage(wal, "%s/%s is not listed in streams.cat: the catalog lost entries (cut short?)", wal->dir, name);
            rc = -EUCLEAN;
            break;
        }
        if (cs && cs->gone) { /* a read-only open: reclaimed since the catalog was read */
            seg_free(seg);
            continue;
        }
        if ((rc = seg_add(wal, seg))) {
            seg_free(seg);
            break;
        }
        wal->report.segments++;
    }
    free(ids);
    if (unlinked) fsync_dir(wal->dirfd);
    /* Every file is checked against the listing before any is scanned: a file the catalog
     * does not list is the first thing to report (small runs of later streams may lie in
     * older files, whose scan would meet streams the cut catalog lost). */
    if (!rc) rc = scan_all(wal);
    if (rc) return rc;
    if (wal->opt.read_only && (rc = cat_refresh(wal))) return rc;
    if (v2 && (rc = check_listed_files(wal))) return rc;
    size_t ns = atomic_load(&wal->n_streams);
    for (size_t i = 0; i < ns && !rc; i++) rc = settle_stream_noted(wal, stream_get(wal, (uint32_t)i));
    return rc;
}

/* Recovery reads the mappings of files whose sizes seg_open checked; a SIGBUS can still
 * come from a disk read error or a file cut short meanwhile: the open fails with -EIO. */
int recover(walfs_t *wal)
{
    GUARD_BEGIN(NULL, {
        wal_damage(wal, "%s: I/O error (SIGBUS) reading segment data during recovery", wal->dir);
        free(wal->check_floors);
        wal->check_floors = NULL;
        wal->n_check_floors = 0;
        return -EIO;
    });
    int rc = recover_unguarded(wal);
    GUARD_END();
    free(wal->check_floors);
    wal->check_floors = NULL;
    wal->n_check_floors = 0;
    return rc;
}
