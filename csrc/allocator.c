/* allocator.c: hands runs to streams, creating segments as needed. Runs are taken from
 * the oldest segment with room, so holes left by recovery are reused.
 *
 * Size classes (issue 35: a stream costs what it holds): a stream's first run is a small
 * run of SMALL_RUN_MIN (4 KiB) bytes, each next one SMALL_RUN_GROWTH (4) times larger
 * when appends filled the last one (run_growth_base: a session's open starts new runs),
 * while a block holds at least SMALL_SLOTS_MIN runs of the class; from there on its runs
 * are block runs as before. A record too large for the class takes the smallest class that
 * holds it (or block runs). Small runs of one class live in a CARVED block: the block's
 * carve header (format.c) names the class, and the block is cut into block_size / class
 * slots, one run each. A block once carved stays carved (its carve header is never
 * removed) until its segment file is reclaimed.
 *
 * Space is reserved ahead, block by block: a segment file is created at its full length
 * but sparse (its header area allocated), and the blocks of a run, or a block being carved,
 * are fallocate()d before anything is written there. A full disk is then -ENOSPC at the
 * allocation of a run (before the append writes anything), never a torn record or a SIGBUS
 * on a write through the mapping. */
#include "internal.h"

#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>

uint32_t blocks_needed(const walfs_t *wal, uint64_t bytes)
{
    uint64_t total = BLK_DATA_OFF + bytes;
    return (uint32_t)((total + wal->opt.block_size - 1) / wal->opt.block_size);
}

int small_class(const walfs_t *wal, uint64_t size)
{
    for (uint64_t c = SMALL_RUN_MIN; c * SMALL_SLOTS_MIN <= wal->opt.block_size; c *= SMALL_RUN_GROWTH)
        if (c == size) return 1;
    return 0;
}

uint64_t run_size_for(const walfs_t *wal, uint64_t prev, uint64_t need)
{
    uint64_t want = prev ? prev * SMALL_RUN_GROWTH : SMALL_RUN_MIN;
    if (want < BLK_DATA_OFF + need) want = BLK_DATA_OFF + need;
    for (uint64_t c = SMALL_RUN_MIN; c * SMALL_SLOTS_MIN <= wal->opt.block_size; c *= SMALL_RUN_GROWTH)
        if (c >= want && (!prev || small_class(wal, prev))) return c;
    return (uint64_t)blocks_needed(wal, need) * wal->opt.block_size;
}

/* The run size a stream's next run grows from, when its last run takes nothing more: that
 * run's own size when appends filled it (at least half of it used), else the class below
 * the one that holds what it holds. A writer's open starts new runs (the gids of a new
 * epoch do not fit an older run's slots), so a stream that gets a few records a session
 * would otherwise climb a class each session (4 KiB, 16 KiB, ... a 10 MiB block per
 * session after five); this way it takes, each session, the class its records need. 0:
 * start from the smallest class. used: the run's bytes of records, headers and slots. */
uint64_t run_growth_base(const walfs_t *wal, uint64_t run_size, uint64_t used)
{
    if (used * 2 >= run_size) return run_size;
    for (uint64_t c = SMALL_RUN_MIN; c * SMALL_SLOTS_MIN <= wal->opt.block_size; c *= SMALL_RUN_GROWTH)
        if (c >= used) return c == SMALL_RUN_MIN ? 0 : c / SMALL_RUN_GROWTH;
    return run_size;
}

uint32_t seg_runs_used(const segment_t *seg)
{
    uint32_t heads = 0;
    for (uint32_t k = 0; k < seg->n_blocks; k++) heads += seg->block_state[k] == BS_HEAD;
    return heads + seg->small_used;
}

int seg_reserve(walfs_t *wal, segment_t *seg, uint32_t first, uint32_t n)
{
    uint64_t off = SEG_HDR_SIZE + (uint64_t)first * wal->opt.block_size, len = (uint64_t)n * wal->opt.block_size;
    if (wal->opt.min_free_bytes) {
        /* The reserve (segment.c) holds for blocks too: catalog entries, cursors and
         * settings keep their room. Blocks reserved before cost nothing more. */
        struct statvfs st;
        if (fstatvfs(seg->fd, &st) == 0 && (uint64_t)st.f_bavail * st.f_frsize < len + wal->opt.min_free_bytes) {
            /* Perhaps already reserved (a block freed by recovery): fallocate is then a no-op. */
            off_t probe = lseek(seg->fd, (off_t)off, SEEK_HOLE);
            if (probe < 0 || (uint64_t)probe < off + len) return -ENOSPC;
        }
    }
    int rc = fault_hit(wal, WALFS_FAULT_ALLOC);
    if (rc) return rc;
    return fallocate(seg->fd, 0, (off_t)off, (off_t)len) == 0 ? 0 : -errno;
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

static carve_t *carve_new(const walfs_t *wal, uint32_t class_size, uint64_t carve_id)
{
    uint32_t n_slots = wal->opt.block_size / class_size;
    carve_t *c = calloc(1, sizeof(*c) + ((n_slots + 63) / 64) * sizeof(uint64_t));
    if (!c) return NULL;
    c->carve_id = carve_id;
    c->class_size = class_size;
    c->n_slots = n_slots;
    return c;
}

/* A carved block is read and written without readahead: a page fault in it would read
 * around it as far as the device's read_ahead_kb (8 MiB here), and in a fresh block that
 * is zeroing thousands of page-cache pages for a run of 4 KiB (4 ms per carve, measured),
 * and pages a later open's SEEK_DATA takes for data. Advice only: a failed madvise
 * changes nothing but the speed. */
void carve_advise(const walfs_t *wal, const segment_t *seg, uint32_t i)
{
    uint64_t off = SEG_HDR_SIZE + (uint64_t)i * wal->opt.block_size;
    if (seg->map != MAP_FAILED) (void)madvise((void *)(seg->map + off), wal->opt.block_size, MADV_RANDOM);
    if (seg->wmap != MAP_FAILED) (void)madvise((void *)(seg->wmap + off), wal->opt.block_size, MADV_RANDOM);
}

int carve_mark(walfs_t *wal, segment_t *seg, uint32_t i, uint32_t class_size, uint64_t carve_id)
{
    if (seg->carves[i]) return 0;
    if (!(seg->carves[i] = carve_new(wal, class_size, carve_id))) return -ENOMEM;
    seg->block_state[i] = BS_CARVED;
    return 0;
}

void carve_use_slot(segment_t *seg, uint32_t i, uint32_t slot)
{
    carve_t *c = seg->carves[i];
    if (c->used[slot / 64] & (1ull << (slot % 64))) return;
    c->used[slot / 64] |= 1ull << (slot % 64);
    c->n_used++;
    seg->small_used++;
}

static int64_t free_slot(const carve_t *c)
{
    if (c->n_used >= c->n_slots) return -1;
    for (uint32_t w = 0; w < (c->n_slots + 63) / 64; w++) {
        uint64_t free_bits = ~c->used[w];
        if (!free_bits) continue;
        uint32_t s = w * 64 + (uint32_t)__builtin_ctzll(free_bits);
        return s < c->n_slots ? (int64_t)s : -1;
    }
    return -1;
}

/* Under wal->lock: a block of seg carved for class_size. Its carve header is written (to
 * the page cache) before any run in the block, and names a carve id no other carve of
 * any block ever had: the epoch of this open (every writer open has its own, catalog.c)
 * and a count of this open's carves. Every small run header names the carve id of its
 * block, so a run header is a run of this carve only if both say so.
 *
 * No fdatasync here (each one cost a few ms on a fresh stream; the allocation of a
 * carve was the only sync of its kind). What makes that safe:
 * - A small run is promised durable only by a sync of its segment file, which writes
 *   every dirty page of the file, so also the carve header written before it: a durable
 *   run lies in a block whose carve header is durable.
 * - The run in slot 0, which a carve hands out first, has its open header in the same
 *   512-byte sector and page as the carve header (bytes 0 and 128): they reach the disk
 *   together, and a block never shows slot 0's run without its carve header.
 * - A later slot's header may reach the disk without the carve header (the kernel writes
 *   pages back in any order), in a run no sync promised. Recovery sees no carve header
 *   and the block is free; if it is carved again, even for the same class, its new carve
 *   id rejects the stale header (format.c "Small runs").
 * -1 and *rc if none. */
static int64_t carve_block(walfs_t *wal, segment_t *seg, uint32_t class_size, int *rc)
{
    int64_t at = find_run(seg, 1);
    if (at < 0) return -1;
    if (wal->carve_seq == UINT32_MAX) { /* 4 G carves in one open: reopen for a new epoch */
        *rc = -EOVERFLOW;
        return -1;
    }
    if ((*rc = seg_reserve(wal, seg, (uint32_t)at, 1))) return -1;
    pthread_mutex_lock(&wal->gid_lock);
    uint64_t carve_id = wal->epoch << 32 | (uint64_t)(wal->carve_seq + 1);
    pthread_mutex_unlock(&wal->gid_lock);
    carve_t *c = carve_new(wal, class_size, carve_id);
    if (!c) {
        *rc = -ENOMEM;
        return -1;
    }
    carve_advise(wal, seg, (uint32_t)at);
    uint8_t hdr[BLK_HDR_SIZE];
    fmt_blk_carve(hdr, wal, seg->id, (uint32_t)at, class_size, carve_id);
    uint64_t off = SEG_HDR_SIZE + (uint64_t)at * wal->opt.block_size + BLK_CARVE_OFF;
    struct iovec iov = {hdr, sizeof(hdr)};
    *rc = seg->wmap != MAP_FAILED ? seg_mwritev(wal, seg, &iov, 1, off) : seg_pwritev(wal, seg, &iov, 1, off);
    if (*rc) {
        free(c);
        return -1;
    }
    wal->carve_seq++;
    seg->carves[at] = c;
    seg->block_state[at] = BS_CARVED;
    return at;
}

/* Under wal->lock. A small run of class run_size: a free slot of a carved block of that
 * class (oldest segment first), else a newly carved block. */
static int alloc_small(walfs_t *wal, uint32_t stream_no, uint32_t run_size, int may_create, block_t **out)
{
    segment_t *seg = NULL;
    int64_t blk = -1, slot = -1;
    for (size_t k = 0; k < wal->n_segs && slot < 0; k++) {
        segment_t *sg = wal->segs[k];
        if (sg->cleaning) continue;
        for (uint32_t i = 0; i < sg->n_blocks; i++) {
            carve_t *c = sg->carves[i];
            if (c && c->class_size == run_size && (slot = free_slot(c)) >= 0) {
                seg = sg;
                blk = i;
                break;
            }
        }
    }
    int rc = 0;
    if (slot < 0) {
        for (size_t k = 0; k < wal->n_segs && blk < 0; k++) {
            if (wal->segs[k]->cleaning || find_run(wal->segs[k], 1) < 0) continue;
            if ((rc = budget_check(wal, stream_no, wal->segs[k]))) return rc;
            blk = carve_block(wal, wal->segs[k], run_size, &rc);
            if (rc) return rc;
            seg = wal->segs[k];
        }
        if (blk < 0) {
            if (!may_create) return -EAGAIN;
            if ((rc = budget_check(wal, stream_no, NULL))) return rc;
            if ((rc = seg_create(wal, &seg))) return rc;
            blk = carve_block(wal, seg, run_size, &rc);
            if (rc) return rc;
        }
        slot = 0;
    } else if ((rc = budget_check(wal, stream_no, seg))) {
        return rc;
    }
    block_t *b = calloc(1, sizeof(*b));
    if (!b) return -ENOMEM;
    b->seg = seg;
    b->index = (uint32_t)blk;
    b->n_blocks = 0;
    b->slot = (uint32_t)slot;
    b->stream_no = stream_no;
    b->run_size = run_size;
    b->file_off = SEG_HDR_SIZE + (uint64_t)blk * wal->opt.block_size + (uint64_t)slot * run_size;
    b->data_end = BLK_DATA_OFF;
    carve_use_slot(seg, (uint32_t)blk, (uint32_t)slot);
    *out = b;
    return 0;
}

/* Under wal->lock. The run is marked used but nothing is written yet (a newly carved
 * block's carve header excepted). may_create == 0: -EAGAIN instead of creating a segment
 * (a file created and fsynced). */
static int alloc_run_in(walfs_t *wal, uint32_t stream_no, uint64_t run_size, int may_create, block_t **out)
{
    if (run_size < wal->opt.block_size) {
        if (!small_class(wal, run_size)) return -EINVAL;
        return alloc_small(wal, stream_no, (uint32_t)run_size, may_create, out);
    }
    uint64_t nb = run_size / wal->opt.block_size;
    if (nb == 0 || nb > wal->blocks_per_seg || run_size % wal->opt.block_size) return -EMSGSIZE;
    uint32_t n_blocks = (uint32_t)nb;
    segment_t *seg = NULL;
    int64_t at = -1;
    for (size_t i = 0; i < wal->n_segs && at < 0; i++) {
        if (wal->segs[i]->cleaning) continue;
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
    int rc = seg_reserve(wal, seg, (uint32_t)at, n_blocks);
    if (rc) return rc;
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

int alloc_run(walfs_t *wal, uint32_t stream_no, uint64_t run_size, block_t **out)
{
    return alloc_run_in(wal, stream_no, run_size, 1, out);
}

int alloc_run_existing(walfs_t *wal, uint32_t stream_no, uint64_t run_size, block_t **out)
{
    return alloc_run_in(wal, stream_no, run_size, 0, out);
}

/* Under wal->lock: gives a run back (its header is already gone from disk or was never
 * written). A small run frees its slot; its block stays carved. */
void release_run(walfs_t *wal, block_t *b)
{
    (void)wal;
    if (!b->n_blocks) {
        carve_t *c = b->seg->carves[b->index];
        if (c && (c->used[b->slot / 64] & (1ull << (b->slot % 64)))) {
            c->used[b->slot / 64] &= ~(1ull << (b->slot % 64));
            c->n_used--;
            b->seg->small_used--;
        }
        block_free(b);
        return;
    }
    for (uint32_t i = 0; i < b->n_blocks; i++) b->seg->block_state[b->index + i] = BS_FREE;
    block_free(b);
}
