/* frontier.c: the durable frontier of unsealed runs (format.c: "frontier header").
 *
 * Only full runs are sealed, so the last run of every stream is verified record by record
 * at open, and the first record that fails ends it. That is right for a torn tail (a crash
 * while records were being written) and wrong for damage to records that a sync already
 * made durable: those must be kept and reported, never cut. The frontier tells the two apart.
 *
 * Each sync round (sync.c, lead_sync) takes a snapshot, BEFORE it collects the dirty
 * segments, of every unsealed run whose published count grew since its frontier was last
 * written. Appends publish after their bytes are written and a written segment is marked
 * dirty before the write, so every record in the snapshot is covered by the round's
 * fdatasync. Once that fdatasync succeeded, the run's frontier header (count, data_end) is
 * rewritten in place in the run's header area. It is itself durable after the next sync
 * round (the interval thread, the next fsync=always append or sync(), close: the write
 * marks its segment dirty), so the frontier on disk lags the real durable point by at most
 * one round, and never claims a record that was not durable: after a power cut it is at
 * or below the records that survived.
 *
 * Recovery (recovery.c) reads it: a record below the frontier that fails its checks is
 * damage (quarantined: kept, refused to reads, reported naming file, byte and offset);
 * above it, a torn tail (cut, counted).
 * Directories written before the frontier existed simply have none: their runs verify
 * as before (no version change; older code ignores these bytes).
 */
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

typedef struct frontier_note {
    block_t *b;
    stream_t *s;
    uint64_t first_offset, count, data_end;
} frontier_note_t;

struct frontier {
    frontier_note_t *v;
    size_t n, cap;
};

static int note(frontier_t *f, stream_t *s, block_t *b)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        frontier_note_t *v = realloc(f->v, cap * sizeof(*v));
        if (!v) return -ENOMEM;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (frontier_note_t){b, s, b->first_offset, b->count, b->data_end};
    return 0;
}

frontier_t *frontier_snapshot(walfs_t *wal)
{
    if (wal->opt.read_only) return NULL;
    frontier_t *f = calloc(1, sizeof(*f));
    if (!f) return NULL; /* the frontier is a detector: without it, runs verify as before */
    size_t ns = atomic_load(&wal->n_streams);
    for (size_t i = 0; i < ns; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        pthread_mutex_lock(&s->lock);
        /* The last run, and the one before it if it filled up since the last round. */
        for (size_t k = 0; k < 2 && k < s->n_blocks; k++) {
            block_t *b = s->blocks[s->n_blocks - 1 - k];
            if (b->sealed || b->count <= b->frontier_count) break;
            if (note(f, s, b)) break;
        }
        pthread_mutex_unlock(&s->lock);
    }
    return f;
}

/* After the round's fdatasync succeeded: writes the frontier of every noted run that is
 * still its stream's (reclamation may have freed it meanwhile). */
void frontier_record(walfs_t *wal, frontier_t *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) {
        frontier_note_t *n = &f->v[i];
        stream_t *s = n->s;
        pthread_mutex_lock(&s->lock);
        int present = 0;
        for (size_t k = 0; k < 2 && k < s->n_blocks; k++)
            if (s->blocks[s->n_blocks - 1 - k] == n->b) present = 1;
        block_t *b = n->b;
        if (present && b->first_offset == n->first_offset && !b->sealed && n->count > b->frontier_count) {
            uint8_t hdr[BLK_HDR_SIZE];
            fmt_blk_frontier(hdr, wal, b, n->count, n->data_end);
            if (seg_pwrite(wal, b->seg, hdr, sizeof(hdr), b->file_off + BLK_FRONTIER_OFF) == 0)
                b->frontier_count = n->count;
        }
        pthread_mutex_unlock(&s->lock);
    }
}

void frontier_free(frontier_t *f)
{
    if (!f) return;
    free(f->v);
    free(f);
}
