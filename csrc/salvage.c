/*
 * salvage.c: raw scanners behind `walfs fsck --repair` (walfs/salvage.py). They read bytes
 * of a damaged data directory that the caller read or mapped read-only, never open the WAL
 * and never write to it, and rely on nothing but the CRCs of format.c (whose parsers and
 * verifiers they use): a record is salvaged when its crc verifies under the WAL's seed, it
 * lies wholly inside its run and inside the bytes given, it names its run's stream, and its
 * gid is above the previous salvaged record of the run (stale bytes from an earlier use of
 * the block carry lower gids). No format of its own: see format.c.
 *
 * walfs_salvage_start_at is the one writer here: it gives an empty stream of a NEW WAL a
 * starting offset (a FLOOR and a TRIM entry, both ordinary catalog entries).
 */
#include "internal.h"
#include "walfs_salvage.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

int walfs_salvage_identity(const uint8_t *buf, uint64_t len, uint64_t *uuid, uint32_t *block_size,
                           uint64_t *segment_size)
{
    if (len >= CAT_HDR_SIZE && memcmp(buf, "WALFSCAT", 8) == 0)
        return fmt_cat_header_parse(buf, uuid, segment_size, block_size);
    if (len < 64 || memcmp(buf, "WALFSSEG", 8) != 0) return -EUCLEAN;
    uint64_t id = rd64(buf + 32);
    if (rd32(buf + 60) != crc32c(crc_seed_for(id), buf, 60)) return -EBADMSG;
    if (rd32(buf + 8) != SEG_HDR_VERSION) return -EPROTONOSUPPORT;
    *uuid = id;
    *block_size = rd32(buf + 12);
    *segment_size = rd64(buf + 16);
    return 0;
}

#define SALVAGE_GENS 256

int64_t walfs_salvage_catalog(const uint8_t *buf, uint64_t len, uint64_t uuid, walfs_salvage_entry_t *out,
                              uint64_t cap, uint64_t *skipped)
{
    uint32_t seed = crc_seed_for(uuid);
    uint64_t pos = CAT_HDR_SIZE, n = 0;
    uint64_t gen = len >= CAT_HDR_SIZE && memcmp(buf, "WALFSCAT", 8) == 0 ? fmt_cat_header_generation(buf) : 0;
    *skipped = 0;
    while (pos + 8 <= len) {
        /* Cheap plausibility first, so that skipping over garbage costs no CRC of up to
         * 64 KiB per byte: a type walfs writes and a length no entry exceeds. */
        uint16_t type, elen;
        memcpy(&type, buf + pos + 4, 2);
        memcpy(&elen, buf + pos + 6, 2);
        cat_entry_t e;
        const char *why;
        int plausible = type >= CAT_DEFINE && type <= CAT_SEGMENT_GONE && elen >= 8 && elen <= 42 + MAX_NAME;
        size_t used = plausible ? fmt_cat_entry_parse(buf + pos, len - pos, seed, &e, &why) : 0;
        /* Version 3 binds entries to their place in streams.cat (copy 0) or its mirror (1)
         * and to the file's generation: the header's, else (header lost) the last that
         * verified an entry, else the first SALVAGE_GENS. */
        for (uint64_t g = gen, k = 0; plausible && !used && k <= SALVAGE_GENS; g = ++k) {
            if (g == 0 || (k > 0 && g == gen)) continue;
            for (uint32_t copy = 0; !used && copy < 2; copy++)
                used = fmt_cat_entry_parse(buf + pos, len - pos, fmt_cat_loc_seed(seed, copy, pos, g), &e, &why);
            if (used) gen = g;
        }
        if (!used || e.type < CAT_DEFINE || e.type > CAT_SEGMENT_GONE) {
            pos++;
            (*skipped)++;
            continue;
        }
        if (e.type == CAT_SEGMENT || e.type == CAT_SEGMENT_GONE) { /* file lists: salvage reads every file */
            pos += used;
            continue;
        }
        if (n == cap) return -ENOBUFS;
        walfs_salvage_entry_t *o = &out[n++];
        memset(o, 0, sizeof(*o));
        o->type = e.type;
        o->stream_no = e.stream_no;
        o->partition = e.partition;
        o->org_id = e.org_id;
        memcpy(o->topic_hash, e.hash, 16);
        o->name_len = e.name_len;
        memcpy(o->name, e.name, e.name_len);
        o->a = e.a;
        o->b = e.b;
        pos += used;
    }
    *skipped += len > pos ? len - pos : 0;
    return (int64_t)n;
}

/* A record at pos of a run [base, end): 0 and *r filled when it verifies. */
static int rec_at(const uint8_t *seg, uint64_t pos, uint64_t end, uint32_t seed, uint32_t stream_no,
                  rec_hdr_t *r)
{
    if (pos < REC_HDR_SIZE || pos > end || end - pos < REC_HDR_SIZE) return -1;
    fmt_rec_parse(seg + pos, r);
    if ((uint64_t)r->meta_len + r->value_len > end - pos - REC_HDR_SIZE) return -1;
    if (r->stream_no != stream_no) return -1;
    return fmt_rec_check(seg + pos, seed, r) ? -1 : 0;
}

/* The records of the run whose open header h lies at base (run bytes long; the file may
 * end before it) appended to out from *n. */
static void salvage_run(const uint8_t *seg, uint64_t len, uint32_t seed, const blk_hdr_t *h, uint64_t base,
                        uint64_t run, walfs_salvage_rec_t *out, uint64_t *n, uint64_t cap)
{
    uint64_t end = base + run;
    int whole = end <= len; /* a truncated run has lost its slots */
    if (!whole) end = len;
    uint64_t pos = base + BLK_DATA_OFF, prev_gid = 0, view = h->first_byte;
    uint64_t slot_floor = end; /* records may not reach into slots already used */
    for (uint64_t k = 0; *n < cap; k++) {
        rec_hdr_t r;
        uint64_t at = UINT64_MAX, vpos = view;
        /* 1. the record's own index slot */
        if (whole && (k + 1) * SLOT_SIZE <= run - BLK_DATA_OFF) {
            slot_t s;
            fmt_slot_parse(seg + end - SLOT_SIZE * (k + 1), &s);
            uint64_t cand = base + s.pos;
            if (s.pos >= BLK_DATA_OFF && rec_at(seg, cand, end - SLOT_SIZE * (k + 1), seed, h->stream_no, &r) == 0 &&
                (k ? r.gid > prev_gid : r.gid == h->first_gid)) {
                at = cand;
                vpos = h->first_byte + s.view_delta;
            }
        }
        /* 2. right after the previous record */
        if (at == UINT64_MAX && rec_at(seg, pos, slot_floor, seed, h->stream_no, &r) == 0 &&
            (k ? r.gid > prev_gid : r.gid == h->first_gid))
            at = pos;
        if (at == UINT64_MAX) {
            /* Lost record k: go on only while later slots still lead to records. */
            if (!whole || (k + 2) * SLOT_SIZE > run - BLK_DATA_OFF) break;
            slot_t s;
            fmt_slot_parse(seg + end - SLOT_SIZE * (k + 2), &s);
            rec_hdr_t r2;
            if (s.pos < BLK_DATA_OFF || rec_at(seg, base + s.pos, end - SLOT_SIZE * (k + 2), seed, h->stream_no, &r2) != 0 ||
                r2.gid <= prev_gid)
                break;
            pos = base + s.pos;
            continue;
        }
        if (whole && end - SLOT_SIZE * (k + 1) < slot_floor) slot_floor = end - SLOT_SIZE * (k + 1);
        walfs_salvage_rec_t *o = &out[(*n)++];
        o->file_pos = at;
        o->offset = h->first_offset + k;
        o->view_pos = vpos;
        o->gid = r.gid;
        o->timestamp_ms = r.ts;
        o->stream_no = r.stream_no;
        o->meta_len = r.meta_len;
        o->value_len = r.value_len;
        o->batch_left = r.batch_left;
        prev_gid = r.gid;
        pos = at + REC_HDR_SIZE + r.meta_len + r.value_len;
        view = vpos + r.value_len + 1;
    }
}

/* A small-run class of this block size (allocator.c's classes). */
static int salvage_class(uint64_t c, uint32_t block_size)
{
    for (uint64_t k = SMALL_RUN_MIN; k * SMALL_SLOTS_MIN <= block_size; k *= SMALL_RUN_GROWTH)
        if (k == c) return 1;
    return 0;
}

int64_t walfs_salvage_segment(const uint8_t *seg, uint64_t len, uint64_t uuid, uint64_t seg_id,
                              uint32_t block_size, uint64_t *block, walfs_salvage_rec_t *out, uint64_t cap,
                              uint64_t *needed, uint64_t *bad_runs)
{
    if (block_size < MIN_BLOCK_SIZE) return -EINVAL;
    walfs_t *w = calloc(1, sizeof(*w)); /* carries uuid and seed for format.c's parsers */
    if (!w) return -ENOMEM;
    w->uuid = uuid;
    w->crc_seed = crc_seed_for(uuid);
    uint64_t n = 0, i = *block;
    int64_t rc = 0;
    while (i != UINT64_MAX) {
        uint64_t base = SEG_HDR_SIZE + i * (uint64_t)block_size;
        if (base >= len || len - base < BLK_DATA_OFF || i > UINT32_MAX) {
            i = UINT64_MAX;
            break;
        }
        blk_hdr_t h, ch;
        /* A carved block (its carve header, or else its first slot's small run, names the
         * class and the carve id): every slot whose open header proves itself is a run. */
        uint64_t cls = 0, carve_id = 0;
        if (fmt_blk_parse(seg + base + BLK_CARVE_OFF, w, seg_id, (uint32_t)i, BLK_KIND_CARVE, &ch) == 0 &&
            salvage_class(ch.run_size, block_size)) {
            cls = ch.run_size;
            carve_id = ch.carve_id;
        } else if (fmt_blk_parse(seg + base, w, seg_id, (uint32_t)i, BLK_KIND_OPEN, &h) == 0 &&
                   h.version == RUN_VERSION_SMALL && h.slot == 0 && salvage_class(h.run_size, block_size)) {
            cls = h.run_size;
            carve_id = h.carve_id;
        }
        if (cls) {
            uint64_t blk_end = base + block_size < len ? base + block_size : len;
            uint64_t max_recs = (blk_end - base) / REC_HDR_SIZE + 1;
            if (n + max_recs > cap) {
                if (n == 0) {
                    *needed = max_recs;
                    rc = -ENOBUFS;
                }
                break;
            }
            for (uint64_t k = 0; k < block_size / cls; k++) {
                uint64_t at = base + k * cls;
                if (at + BLK_DATA_OFF > len) break;
                if (memcmp(seg + at, "WALFSBLK", 8) != 0) continue;
                if (fmt_blk_parse(seg + at, w, seg_id, (uint32_t)i, BLK_KIND_OPEN, &h) != 0 ||
                    h.version != RUN_VERSION_SMALL || h.run_size != cls || h.slot != k || h.carve_id != carve_id) {
                    (*bad_runs)++;
                    continue;
                }
                salvage_run(seg, len, w->crc_seed, &h, at, cls, out, &n, cap);
            }
            i++;
            continue;
        }
        if (memcmp(seg + base, "WALFSBLK", 8) != 0 ||
            fmt_blk_parse(seg + base, w, seg_id, (uint32_t)i, BLK_KIND_OPEN, &h) != 0 || h.version != FORMAT_VERSION) {
            if (memcmp(seg + base, "WALFSBLK", 8) == 0) (*bad_runs)++;
            i++;
            continue;
        }
        uint64_t nb = h.n_blocks ? h.n_blocks : 1;
        uint64_t run = nb * block_size, end = base + run;
        if (end > len) end = len;
        uint64_t max_recs = (end - base - BLK_DATA_OFF) / REC_HDR_SIZE + 1;
        if (n + max_recs > cap) {
            if (n == 0) {
                *needed = max_recs;
                rc = -ENOBUFS;
            }
            break;
        }
        salvage_run(seg, len, w->crc_seed, &h, base, run, out, &n, cap);
        i += nb;
    }
    free(w);
    *block = i;
    return rc ? rc : (int64_t)n;
}

int walfs_salvage_start_at(walfs_t *wal, uint32_t stream_no, uint64_t next_offset, uint64_t next_byte)
{
    if (wal->opt.read_only) return -EROFS;
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    int empty = s->n_blocks == 0 && s->next_offset == 0;
    pthread_mutex_unlock(&s->lock);
    if (!empty) return -EINVAL;
    if (next_offset == 0 && next_byte == 0) return 0;
    uint8_t buf[64];
    pthread_mutex_lock(&wal->lock);
    size_t len = fmt_cat_floor(buf, wal->crc_seed, stream_no, next_offset, next_byte, wal->floor_gid);
    len += fmt_cat_trim(buf + len, wal->crc_seed, stream_no, next_offset);
    int rc = cat_append(wal, buf, len);
    if (!rc) {
        pthread_mutex_lock(&s->lock);
        s->next_offset = s->low_offset = s->floor_offset = next_offset;
        s->next_byte = s->floor_byte = next_byte;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&wal->lock);
    return rc;
}
