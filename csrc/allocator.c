/* allocator.c: hands runs of blocks to streams, creating segments as needed. Runs are
 * taken from the oldest segment with room, so holes left by recovery are reused. */
#include "internal.h"

#include <stdlib.h>

uint32_t blocks_needed(const walfs_t *wal, uint64_t bytes)
{
    uint64_t total = BLK_DATA_OFF + bytes;
    return (uint32_t)((total + wal->opt.block_size - 1) / wal->opt.block_size);
}

static int64_t find_run(const segment_t *seg, uint32_t n)
{
    uint32_t run = 0;
    for (uint32_t i = 0; i < seg->n_blocks; i++) {
        run = seg->block_state[i] == BS_FREE ? run + 1 : 0;
        if (run == n) return (int64_t)(i + 1 - n);
    }
    return -1;
}

/* Under wal->lock. The run is marked used but nothing is written yet. may_create == 0:
 * -EAGAIN instead of creating a segment (a file created and fsynced). */
static int alloc_run_in(walfs_t *wal, uint32_t stream_no, uint32_t n_blocks, int may_create, block_t **out)
{
    if (n_blocks == 0 || n_blocks > wal->blocks_per_seg) return -EMSGSIZE;
    segment_t *seg = NULL;
    int64_t at = -1;
    for (size_t i = 0; i < wal->n_segs && at < 0; i++) {
        at = find_run(wal->segs[i], n_blocks);
        if (at >= 0) seg = wal->segs[i];
    }
    int brc = budget_check(wal, stream_no, at < 0 ? NULL : seg);
    if (brc) return brc;
    if (at < 0) {
        if (!may_create) return -EAGAIN;
        int rc = seg_create(wal, &seg);
        if (rc) return rc;
        at = 0;
    }
    block_t *b = calloc(1, sizeof(*b));
    if (!b) return -ENOMEM;
    b->seg = seg;
    b->index = (uint32_t)at;
    b->n_blocks = n_blocks;
    b->stream_no = stream_no;
    b->run_size = (uint64_t)n_blocks * wal->opt.block_size;
    b->file_off = SEG_HDR_SIZE + (uint64_t)at * wal->opt.block_size;
    b->data_end = BLK_DATA_OFF;
    seg->block_state[at] = BS_HEAD;
    for (uint32_t i = 1; i < n_blocks; i++) seg->block_state[at + i] = BS_TAIL;
    *out = b;
    return 0;
}

int alloc_run(walfs_t *wal, uint32_t stream_no, uint32_t n_blocks, block_t **out)
{
    return alloc_run_in(wal, stream_no, n_blocks, 1, out);
}

int alloc_run_existing(walfs_t *wal, uint32_t stream_no, uint32_t n_blocks, block_t **out)
{
    return alloc_run_in(wal, stream_no, n_blocks, 0, out);
}

/* Under wal->lock: gives a run back (its header is already gone from disk or was never
 * written). */
void release_run(walfs_t *wal, block_t *b)
{
    (void)wal;
    for (uint32_t i = 0; i < b->n_blocks; i++) b->seg->block_state[b->index + i] = BS_FREE;
    block_free(b);
}
