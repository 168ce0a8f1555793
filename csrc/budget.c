/* budget.c: what a stream costs on disk, and the cap that bounds it (retention by size,
 * walfs/local_engine.py, is built on these two numbers).
 *
 * Disk is counted in whole segment files, the unit reclamation deletes (a file's blocks
 * are reserved as runs take them: allocator.c). A stream is charged for every file that
 * holds one of its kept runs, block or small (a run not wholly below its low watermark,
 * or one still open for appends), and for every file that holds only its runs, kept or
 * trimmed (reclamation has not deleted it yet). A file shared with another stream's kept
 * runs and holding none of this stream's kept ones is that other stream's cost.
 *
 * A stream with a file cap may not be charged for more files than the cap: an append that
 * needs a new run in a file the stream is not yet charged for (a new segment, or room in
 * one it has no run in) then fails with -EDQUOT before anything is written. The count is
 * of published runs: the runs an append in progress has planned are not in it, so one
 * append is never refused for its own size (a batch larger than a segment may take the
 * stream past the cap by what it needs; retention trims it back at the next pass). */
#include "internal.h"

/* Under wal->lock and s->lock: marks the charged files (seg->tally_charged under the
 * returned mark) and returns how many; first_offsets gets, oldest first, the first offset
 * of the stream's runs in each (up to max). */
static size_t charged_files(walfs_t *wal, const stream_t *s, uint64_t *mark_out, uint64_t *first_offsets,
                            size_t max)
{
    uint64_t mark = ++wal->tally_mark;
    for (size_t k = 0; k < s->n_blocks; k++) {
        const block_t *b = s->blocks[k];
        segment_t *seg = b->seg;
        if (seg->tally_mark != mark) {
            seg->tally_mark = mark;
            seg->tally_runs = 0;
            seg->tally_kept = 0;
            seg->tally_charged = -1; /* not judged yet */
        }
        seg->tally_runs++;
        if (!b->full || b->first_offset + b->count > s->low_offset) seg->tally_kept = 1;
    }
    size_t n = 0;
    for (size_t k = 0; k < s->n_blocks; k++) {
        const block_t *b = s->blocks[k];
        segment_t *seg = b->seg;
        if (seg->tally_charged != -1) continue;
        seg->tally_charged = seg->tally_kept || seg_runs_used(seg) == seg->tally_runs;
        if (!seg->tally_charged) continue;
        if (n < max) first_offsets[n] = b->first_offset;
        n++;
    }
    *mark_out = mark;
    return n;
}

/* Under wal->lock (alloc_run): 0, or -EDQUOT if a new run of the stream in seg (NULL: a
 * new segment) would take it past its file cap. */
int budget_check(walfs_t *wal, uint32_t stream_no, const segment_t *seg)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s || !s->file_cap) return 0;
    pthread_mutex_lock(&s->lock);
    uint64_t mark;
    size_t n = charged_files(wal, s, &mark, NULL, 0);
    int already = seg && seg->tally_mark == mark && seg->tally_charged == 1;
    pthread_mutex_unlock(&s->lock);
    return !already && n >= s->file_cap ? -EDQUOT : 0;
}

int walfs_stream_files(walfs_t *wal, uint32_t stream_no, uint64_t *first_offsets, uint32_t max)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&wal->lock);
    pthread_mutex_lock(&s->lock);
    uint64_t mark;
    size_t n = charged_files(wal, s, &mark, first_offsets, max);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&wal->lock);
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

int walfs_stream_set_file_cap(walfs_t *wal, uint32_t stream_no, uint32_t cap)
{
    if (wal->opt.read_only) return -EROFS;
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&wal->lock);
    s->file_cap = cap;
    pthread_mutex_unlock(&wal->lock);
    return 0;
}

uint64_t walfs_segment_size(walfs_t *wal)
{
    return wal->opt.segment_size;
}
