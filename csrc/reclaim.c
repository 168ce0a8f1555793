/* reclaim.c: trims (a durable low watermark per stream), reclamation of segment files whose
 * every run is sealed and below its stream's low watermark, and the full check (fsck).
 * Reclamation works the same for files written before a restart: it looks only at what
 * recovery rebuilt, never at in-memory history. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

int walfs_trim(walfs_t *wal, uint32_t stream_no, uint64_t low_offset)
{
    if (wal->opt.read_only) return -EROFS;
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    int rc = low_offset > s->next_offset ? -ERANGE : 0;
    int needed = low_offset > s->low_offset;
    int sync_first = low_offset > s->durable_offset;
    pthread_mutex_unlock(&s->lock);
    if (rc || !needed) return rc;
    /* A durable low watermark above the durable end would outlive the records it keeps:
     * after a power cut the stream would end below its own low watermark. */
    if (sync_first && (rc = walfs_sync(wal))) return rc;
    uint8_t buf[32];
    size_t len = fmt_cat_trim(buf, wal->crc_seed, stream_no, low_offset);
    pthread_mutex_lock(&wal->lock);
    rc = cat_append(wal, buf, len);
    if (!rc) {
        pthread_mutex_lock(&s->lock);
        if (low_offset > s->low_offset) s->low_offset = low_offset;
        pthread_mutex_unlock(&s->lock);
        /* A failed compaction leaves the old catalog, whole and current: the trim stands. */
        int crc = cat_compact_if_due(wal);
        if (crc) wal_log(wal, "catalog compaction failed (%d); keeping the old catalog", crc);
    }
    pthread_mutex_unlock(&wal->lock);
    return rc;
}

/* A retired run may still wait for its seal (sync.c): it must not outlive its block. */
static void forget_pending_seal(walfs_t *wal, const block_t *b)
{
    pthread_mutex_lock(&wal->seal_lock);
    size_t keep = 0;
    for (size_t i = 0; i < wal->n_seals; i++)
        if (wal->seals[i].block != b) wal->seals[keep++] = wal->seals[i];
    wal->n_seals = keep;
    pthread_mutex_unlock(&wal->seal_lock);
}

int walfs_stream_delete(walfs_t *wal, uint32_t stream_no)
{
    if (wal->opt.read_only) return -EROFS;
    stream_t *s = stream_get(wal, stream_no);
    if (!s || s->deleted) return -ENOENT;
    pthread_mutex_lock(&s->append_lock); /* no append of this stream in flight */
    int rc = s->deleted ? -ENOENT : walfs_sync(wal); /* the TRIM below stays under the durable end */
    if (!rc) {
        pthread_mutex_lock(&s->lock);
        uint64_t end = s->next_offset;
        pthread_mutex_unlock(&s->lock);
        uint8_t buf[64];
        size_t len = fmt_cat_trim(buf, wal->crc_seed, stream_no, end);
        len += fmt_cat_delete(buf + len, wal->crc_seed, stream_no);
        pthread_mutex_lock(&wal->lock);
        rc = cat_append(wal, buf, len);
        if (!rc) {
            pthread_mutex_lock(&s->lock);
            if (end > s->low_offset) s->low_offset = end;
            s->deleted = 1;
            pthread_mutex_unlock(&s->lock);
            int crc = cat_compact_if_due(wal);
            if (crc) wal_log(wal, "catalog compaction failed (%d); keeping the old catalog", crc);
        }
        pthread_mutex_unlock(&wal->lock);
    }
    pthread_mutex_unlock(&s->append_lock);
    return rc;
}

typedef struct seg_tally {
    size_t runs;       /* published runs in the segment */
    int keep;          /* some run is still needed */
} seg_tally_t;

static size_t seg_index(const walfs_t *wal, const segment_t *seg)
{
    for (size_t i = 0; i < wal->n_segs; i++)
        if (wal->segs[i] == seg) return i;
    return SIZE_MAX;
}

/* A run reclamation must keep: records at or above its stream's low watermark, or not yet
 * sealed or retired (under s->lock). */
static int run_needed(walfs_t *wal, const stream_t *s, const block_t *b)
{
    pthread_mutex_lock(&wal->seal_lock);
    int sealed = b->sealed;
    pthread_mutex_unlock(&wal->seal_lock);
    /* A full run wholly below the low watermark needs no seal to go: nothing in it is
     * read again, and a full run takes no more writes. */
    int retired = b->full && b->first_offset + b->count <= s->low_offset;
    return !(sealed || retired) || b->first_offset + b->count > s->low_offset;
}

/* ---- the cleaner ----
 * A small idle stream must not pin a segment file for ever. When every run an old segment
 * (not the newest) still needs is a small run (sealed, or its stream's open last run) of a
 * stream whose append lock is free, and those runs take at most a quarter of the file, the
 * cleaner copies each one into a new small run of the same class elsewhere: same offsets,
 * same gids, same bytes (records and index slots), its headers naming the segment copied
 * from (format.c "Small runs": src_seg). The copies are made durable (a sync), then the
 * ordinary reclamation below writes FLOORs and the segment's SEGMENT_GONE entry, and only
 * then do the copies replace the originals in memory. Recovery keeps a copy only when its
 * source segment is gone (SEGMENT_GONE, or deleted): a crash before that entry is durable
 * leaves the originals in force and the copies are dropped; after it, the source file is
 * deleted and the copies are the runs. No record is lost or doubled at any cut. */
#define CLEAN_SHARE 4 /* copy out at most segment_size / CLEAN_SHARE bytes of runs */

typedef struct move {
    stream_t *s;
    block_t *orig, *copy;
} move_t;

typedef struct clean {
    segment_t *seg;         /* the segment being cleaned (NULL: none) */
    move_t *moves;
    size_t n_moves;
    stream_t **held;        /* streams whose append lock the cleaner holds */
    size_t n_held;
} clean_t;

static int is_moved(const clean_t *c, const block_t *b)
{
    for (size_t i = 0; i < c->n_moves; i++)
        if (c->moves[i].orig == b) return 1;
    return 0;
}

/* Gives the copies back (their open and seal headers zeroed) and the locks: the originals
 * stay in force. */
static void clean_undo(walfs_t *wal, clean_t *c)
{
    for (size_t i = 0; i < c->n_moves; i++) {
        block_t *b = c->moves[i].copy;
        if (!b) continue;
        if (seg_zero(wal, b->seg, b->file_off, BLK_HDR_SIZE) || seg_zero(wal, b->seg, b->file_off + BLK_SEAL_OFF, BLK_HDR_SIZE))
            wal_log(wal, "cleaner: could not zero an unused copy (recovery drops it: its source segment stays)");
        pthread_mutex_lock(&wal->lock);
        release_run(wal, b);
        pthread_mutex_unlock(&wal->lock);
        c->moves[i].copy = NULL;
    }
    c->n_moves = 0;
    if (c->seg) {
        pthread_mutex_lock(&wal->lock);
        c->seg->cleaning = 0;
        pthread_mutex_unlock(&wal->lock);
    }
    c->seg = NULL;
}

static void clean_free(clean_t *c)
{
    for (size_t i = 0; i < c->n_held; i++) pthread_mutex_unlock(&c->held[i]->append_lock);
    free(c->held);
    free(c->moves);
    memset(c, 0, sizeof(*c));
}

/* Writes the copy of c->moves[i].orig into its copy: headers, records, index slots. */
static int clean_write(walfs_t *wal, move_t *m)
{
    block_t *o = m->orig, *b = m->copy;
    b->count = o->count;
    b->last_gid = o->last_gid;
    b->data_end = o->data_end;
    b->byte_len = o->byte_len;
    b->first_ts = o->first_ts;
    b->last_ts = o->last_ts;
    b->sealed = o->sealed;
    b->full = o->full;
    b->frontier_count = b->durable_count = o->count;
    b->wb_end = b->data_end;
    b->wb_slots = b->count * SLOT_SIZE;
    uint8_t hdr[BLK_HDR_SIZE];
    int rc;
    if (b->data_end > BLK_DATA_OFF &&
        (rc = seg_pwrite(wal, b->seg, run_ptr(o, BLK_DATA_OFF), b->data_end - BLK_DATA_OFF, b->file_off + BLK_DATA_OFF)))
        return rc;
    if (b->count && (rc = seg_pwrite(wal, b->seg, run_ptr(o, o->run_size - b->count * SLOT_SIZE), b->count * SLOT_SIZE,
                                     b->file_off + b->run_size - b->count * SLOT_SIZE)))
        return rc;
    if (b->sealed) {
        fmt_blk_seal(hdr, wal, b);
        if ((rc = seg_pwrite(wal, b->seg, hdr, sizeof(hdr), b->file_off + BLK_SEAL_OFF))) return rc;
    } else {
        fmt_blk_frontier(hdr, wal, b, b->count, b->data_end);
        if ((rc = seg_pwrite(wal, b->seg, hdr, sizeof(hdr), b->file_off + BLK_FRONTIER_OFF))) return rc;
    }
    fmt_blk_open(hdr, wal, b);
    return seg_pwrite(wal, b->seg, hdr, sizeof(hdr), b->file_off);
}

/* Run k of s is one the cleaner moves: needed, and not an idle stream's open run trimmed
 * past (reclamation retires that one instead). Under s->lock. */
static int to_move(walfs_t *wal, const stream_t *s, size_t k)
{
    const block_t *b = s->blocks[k];
    int last_open = k + 1 == s->n_blocks && !b->full;
    return run_needed(wal, s, b) && !(last_open && b->first_offset + b->count <= s->low_offset);
}

/* Picks the oldest segment the cleaner may empty, copies its runs out and syncs. 0 with
 * c->seg NULL when there is nothing to do. */
static int clean_copy(walfs_t *wal, clean_t *c)
{
    memset(c, 0, sizeof(*c));
    size_t ns = atomic_load(&wal->n_streams);
    pthread_mutex_lock(&wal->lock);
    size_t nseg = wal->n_segs;
    segment_t *target = NULL;
    /* One pass over every stream's runs, tallied per segment (wal->segs is in id order). */
    typedef struct {
        uint64_t live;
        size_t runs, needed;
        int bad;
    } ctally_t;
    ctally_t *ct = nseg >= 2 ? calloc(nseg, sizeof(*ct)) : NULL;
    for (size_t i = 0; ct && i < ns; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        pthread_mutex_lock(&s->lock);
        for (size_t k = 0; k < s->n_blocks; k++) {
            block_t *b = s->blocks[k];
            size_t lo = 0, hi = nseg;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (wal->segs[mid]->id < b->seg->id) lo = mid + 1;
                else hi = mid;
            }
            if (lo == nseg || wal->segs[lo] != b->seg) continue;
            ct[lo].runs++;
            if (!to_move(wal, s, k)) continue;
            /* Movable: a small run, sealed or its stream's open last run. */
            int last_open = k + 1 == s->n_blocks && !b->full;
            /* (A run with quarantined records stays where recovery found them.) */
            if (b->n_blocks || (!b->sealed && !last_open) || b->n_quar) ct[lo].bad = 1;
            ct[lo].live += b->run_size;
            ct[lo].needed++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    for (size_t si = 0; ct && si + 1 < nseg && !target; si++)
        if (!ct[si].bad && ct[si].needed && ct[si].runs == seg_runs_used(wal->segs[si]) &&
            ct[si].live <= wal->opt.segment_size / CLEAN_SHARE)
            target = wal->segs[si];
    free(ct);
    if (!target) {
        pthread_mutex_unlock(&wal->lock);
        return 0;
    }
    /* The append locks of the streams with runs to move (trylock: the lock order puts them
     * before wal->lock; a busy stream is not idle, and the next round looks again). */
    c->held = calloc(ns ? ns : 1, sizeof(*c->held));
    c->moves = calloc(ns ? ns : 1, sizeof(*c->moves));
    size_t cap_moves = ns ? ns : 1;
    int rc = c->held && c->moves ? 0 : -ENOMEM;
    for (size_t i = 0; i < ns && !rc; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        int locked = 0;
        pthread_mutex_lock(&s->lock);
        int has = 0;
        for (size_t k = 0; k < s->n_blocks && !has; k++) has = s->blocks[k]->seg == target && to_move(wal, s, k);
        pthread_mutex_unlock(&s->lock);
        if (!has) continue;
        if (pthread_mutex_trylock(&s->append_lock) != 0) {
            rc = -EBUSY;
            break;
        }
        c->held[c->n_held++] = s;
        locked = 1;
        pthread_mutex_lock(&s->lock);
        for (size_t k = 0; k < s->n_blocks && locked; k++) {
            block_t *b = s->blocks[k];
            if (b->seg != target || !to_move(wal, s, k)) continue;
            int last_open = k + 1 == s->n_blocks && !b->full;
            if (b->n_blocks || (!b->sealed && !last_open) || b->n_quar) { /* changed since the count */
                rc = -EBUSY;
                break;
            }
            if (c->n_moves == cap_moves) {
                move_t *nm = realloc(c->moves, 2 * cap_moves * sizeof(*nm));
                if (!nm) {
                    rc = -ENOMEM;
                    break;
                }
                c->moves = nm;
                cap_moves *= 2;
            }
            c->moves[c->n_moves++] = (move_t){s, b, NULL};
        }
        pthread_mutex_unlock(&s->lock);
    }
    if (!rc) {
        target->cleaning = 1;
        c->seg = target;
        for (size_t i = 0; i < c->n_moves && !rc; i++) {
            block_t *o = c->moves[i].orig, *b;
            if ((rc = alloc_run(wal, o->stream_no, o->run_size, &b))) break;
            b->first_offset = o->first_offset;
            b->first_byte = o->first_byte;
            b->first_gid = o->first_gid;
            b->src_seg = target->id;
            c->moves[i].copy = b;
        }
    }
    pthread_mutex_unlock(&wal->lock);
    for (size_t i = 0; i < c->n_moves && !rc; i++) rc = clean_write(wal, &c->moves[i]);
    if (!rc) rc = sync_force(wal); /* the copies are durable before any catalog entry */
    if (rc) {
        clean_undo(wal, c);
        clean_free(c);
        return rc == -EBUSY ? 0 : rc;
    }
    char name[64];
    seg_path(wal, target->id, name, sizeof(name));
    wal_info(wal, "cleaner: copied %zu small runs out of %s", c->n_moves, name);
    return 0;
}

int walfs_reclaim(walfs_t *wal)
{
    if (wal->opt.read_only) return -EROFS;
    stream_t **parked = NULL; /* idle streams whose append lock this call holds */
    size_t n_parked = 0;
    clean_t cl;
    int clrc = clean_copy(wal, &cl); /* before the exclusive section: it syncs */
    if (clrc) wal_log(wal, "cleaner: copying small runs out failed (%d); the segment stays", clrc);
    exclusive_begin(wal); /* no fsync may hold a file we delete */
    pthread_mutex_lock(&wal->lock);
    int rc = 0, deleted = 0;
    size_t nseg = wal->n_segs;
    if (nseg < 2) goto out;
    seg_tally_t *t = calloc(nseg, sizeof(*t));
    if (!t) {
        rc = -ENOMEM;
        goto out;
    }
    size_t ns = atomic_load(&wal->n_streams);
    /* A stream trimmed to its end still has its last run, unsealed and open for appends:
     * it would pin its segment file forever. Such a run is retired (marked full, so the
     * next append starts a new run) when the stream is idle: its append lock is free. A
     * trylock keeps the lock order (append_lock before wal->lock); an appender that holds
     * it is not idle, and the next round looks again. Its records are all below the low
     * watermark, which a trim only raises past durable records (walfs_trim syncs first),
     * so nothing in it is needed: no seal is written, and the FLOOR below keeps its
     * offsets. The retired streams' append locks are held until the files are gone. */
    parked = calloc(ns ? ns : 1, sizeof(*parked));
    if (!parked) {
        free(t);
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < ns; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        pthread_mutex_lock(&s->lock);
        block_t *last = s->n_blocks ? s->blocks[s->n_blocks - 1] : NULL;
        int idle_trimmed = last && !last->full && last->first_offset + last->count <= s->low_offset;
        pthread_mutex_unlock(&s->lock);
        if (idle_trimmed && pthread_mutex_trylock(&s->append_lock) == 0) {
            pthread_mutex_lock(&s->lock);
            if (s->n_blocks && s->blocks[s->n_blocks - 1] == last && !last->full &&
                last->first_offset + last->count <= s->low_offset) {
                last->full = 1;
                parked[n_parked++] = s;
            } else {
                pthread_mutex_unlock(&s->append_lock);
            }
            pthread_mutex_unlock(&s->lock);
        }
    }
    for (size_t i = 0; i < ns; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        pthread_mutex_lock(&s->lock);
        for (size_t k = 0; k < s->n_blocks; k++) {
            block_t *b = s->blocks[k];
            size_t si = seg_index(wal, b->seg);
            if (si == SIZE_MAX) continue;
            t[si].runs++;
            /* A run the cleaner copied (durable) goes with its segment. */
            if (run_needed(wal, s, b) && !is_moved(&cl, b)) t[si].keep = 1;
        }
        pthread_mutex_unlock(&s->lock);
    }
    /* The newest segment is where runs are being allocated; a segment with more used
     * runs than published ones has an append in flight. */
    t[nseg - 1].keep = 1;
    for (size_t si = 0; si + 1 < nseg; si++) {
        if (seg_runs_used(wal->segs[si]) != t[si].runs) t[si].keep = 1;
    }
    /* Floors first: a stream whose every run goes must still know its next offset. */
    uint64_t next_gid = __atomic_load_n(&wal->next_gid, __ATOMIC_RELAXED);
    for (size_t i = 0; i < ns && !rc; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        int affected = 0;
        pthread_mutex_lock(&s->lock);
        for (size_t k = 0; k < s->n_blocks && !affected; k++) {
            size_t si = seg_index(wal, s->blocks[k]->seg);
            affected = si != SIZE_MAX && !t[si].keep;
        }
        uint8_t buf[64];
        /* Only durable state goes into the catalog: appends after the last sync may still
         * vanish in a power cut, and a FLOOR above them would skip their offsets. */
        uint64_t floor_offset = s->durable_offset, floor_byte = s->durable_byte;
        size_t len = affected ? fmt_cat_floor(buf, wal->crc_seed, s->no, floor_offset, floor_byte, next_gid) : 0;
        pthread_mutex_unlock(&s->lock);
        if (affected && !(rc = cat_append(wal, buf, len))) {
            pthread_mutex_lock(&s->lock);
            if (floor_offset > s->floor_offset) s->floor_offset = floor_offset;
            if (floor_byte > s->floor_byte) s->floor_byte = floor_byte;
            pthread_mutex_unlock(&s->lock);
            if (next_gid > wal->floor_gid) wal->floor_gid = next_gid;
        }
    }
    if (!rc) {
        int crc = cat_compact_if_due(wal);
        if (crc) wal_log(wal, "catalog compaction failed (%d); keeping the old catalog", crc);
    }
    /* Catalog v2: SEGMENT_GONE entries before anything is forgotten or unlinked, so
     * that every missing file the catalog lists is damage (recovery.c); a crash between
     * the entries and the unlinks leaves files that the next writer open deletes. */
    size_t n_going = 0;
    for (size_t si = 0; si < nseg; si++) n_going += !t[si].keep;
    if (!rc && n_going) rc = fault_hit(wal, WALFS_FAULT_RECLAIM);
    if (!rc && n_going && wal->cat_version >= 2) {
        uint8_t *ebuf = malloc(n_going * 16);
        size_t elen = 0;
        for (size_t si = 0; ebuf && si < nseg; si++)
            if (!t[si].keep) elen += fmt_cat_segment(ebuf + elen, wal->crc_seed, CAT_SEGMENT_GONE, wal->segs[si]->id, 0);
        rc = ebuf ? cat_append_n(wal, ebuf, elen, n_going) : -ENOMEM;
        free(ebuf);
    }
    if (rc) {
        free(t);
        goto out;
    }
    for (size_t i = 0; i < ns; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        pthread_mutex_lock(&s->lock);
        size_t keep = 0;
        for (size_t k = 0; k < s->n_blocks; k++) {
            block_t *b = s->blocks[k];
            size_t si = seg_index(wal, b->seg);
            if (si != SIZE_MAX && !t[si].keep) {
                block_t *copy = NULL;
                for (size_t m = 0; m < cl.n_moves; m++)
                    if (cl.moves[m].orig == b) {
                        copy = cl.moves[m].copy;
                        cl.moves[m].copy = NULL; /* in force now: the SEGMENT_GONE entry is durable */
                    }
                if (!b->sealed) forget_pending_seal(wal, b);
                block_free(b);
                if (copy) s->blocks[keep++] = copy;
            } else
                s->blocks[keep++] = b;
        }
        s->n_blocks = keep;
        pthread_mutex_unlock(&s->lock);
    }
    segment_t **gone = malloc(nseg * sizeof(*gone));
    size_t n_gone = 0;
    for (size_t si = 0; gone && si < nseg; si++)
        if (!t[si].keep) gone[n_gone++] = wal->segs[si];
    for (size_t i = 0; i < n_gone; i++) {
        if (gone[i] == cl.seg) cl.seg = NULL; /* cleaned: its copies are in force */
        int drc = seg_delete(wal, gone[i]);
        if (drc && !rc) rc = drc;
        deleted++;
    }
    free(gone);
    free(t);
    if (deleted) {
        int drc = fsync_dir(wal->dirfd);
        if (drc && !rc) rc = drc;
    }
out:
    if (cl.seg) cl.seg->cleaning = 0;
    pthread_mutex_unlock(&wal->lock);
    for (size_t i = 0; i < n_parked; i++) pthread_mutex_unlock(&parked[i]->append_lock);
    free(parked);
    exclusive_end(wal);
    /* Copies not put in force (their segment stayed): given back, originals in force. */
    clean_undo(wal, &cl);
    clean_free(&cl);
    return rc ? rc : deleted;
}
