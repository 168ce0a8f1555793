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

int walfs_reclaim(walfs_t *wal)
{
    if (wal->opt.read_only) return -EROFS;
    stream_t **parked = NULL; /* idle streams whose append lock this call holds */
    size_t n_parked = 0;
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
            pthread_mutex_lock(&wal->seal_lock);
            int sealed = b->sealed;
            pthread_mutex_unlock(&wal->seal_lock);
            /* A full run wholly below the low watermark needs no seal to go: nothing in
             * it is read again, and a full run takes no more writes. */
            int retired = b->full && b->first_offset + b->count <= s->low_offset;
            if (!(sealed || retired) || b->first_offset + b->count > s->low_offset) t[si].keep = 1;
        }
        pthread_mutex_unlock(&s->lock);
    }
    /* The newest segment is where runs are being allocated; a segment with more used
     * runs than published ones has an append in flight. */
    t[nseg - 1].keep = 1;
    for (size_t si = 0; si + 1 < nseg; si++) {
        size_t heads = 0;
        for (uint32_t k = 0; k < wal->segs[si]->n_blocks; k++) heads += wal->segs[si]->block_state[k] == BS_HEAD;
        if (heads != t[si].runs) t[si].keep = 1;
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
                if (!b->sealed) forget_pending_seal(wal, b);
                block_free(b);
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
    pthread_mutex_unlock(&wal->lock);
    for (size_t i = 0; i < n_parked; i++) pthread_mutex_unlock(&parked[i]->append_lock);
    free(parked);
    exclusive_end(wal);
    return rc ? rc : deleted;
}
