/* frontier.c: the durable frontier of unsealed runs (format.c: "frontier header").
 *
 * Only full runs are sealed, so every stream's last run has no seal. The frontier says how
 * many of its records a completed sync made durable. It does two things at open:
 *
 * - It tells a torn tail from damage. Above it, the first record that fails its checks
 *   ends the run (a crash while records were being written: cut, counted). Below it, such a
 *   record is damage: kept, refused to reads, reported naming file, byte and offset.
 * - It spares the open from reading the records below it (issue 35: 100,000 streams of
 *   1,000 records are 6 GB to read at every open). A CLEAN frontier (FRONTIER_CLEAN, written
 *   whenever the run holds no quarantined record) is trusted as a seal is: recovery checks
 *   the run's first record and the last one the frontier counts (their slots, headers and
 *   the last one's crc, and that it ends at data_end), and reads only the records above
 *   it. Damage below it is then found by the read that meets it and by `walfs fsck`, as in
 *   a sealed run. A frontier without the flag (an older writer's, or a run with quarantined
 *   records) has every record below it verified, as before.
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
 * or below the records that survived. A clean close syncs twice: every last run's frontier
 * then covers all of it, and the next open reads no record. After a crash, records above
 * the frontier on disk are verified, and recovery has their file synced and their frontier
 * rewritten by the sync that ends it (recovery.c settle_stream), so the next open trusts
 * them too.
 *
 * Directories written before the frontier existed simply have none: their runs verify
 * as before (no version change; older code ignores these bytes, the flag included).
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
