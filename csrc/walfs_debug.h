/*
 * walfs_debug.h: test hooks of the C core. Fault injection, a slow disk and power loss work
 * on a WAL opened with walfs_options_t.test_mode (walfs/local/core.py binds them, walfs/local/debug.py
 * drives them); the
 * writeback wait works in any mode. Errors as walfs.h says.
 */
#ifndef WALFS_DEBUG_H
#define WALFS_DEBUG_H

#include "walfs.h"

/* Fault injection (test mode only), by kind of operation. RECLAIM fails walfs_reclaim where
 * it would write its SEGMENT_GONE entries (nothing is deleted, as when that catalog write
 * fails). WRITEBACK fails the writeback thread's sync_file_range as if it returned -err
 * (csrc/writeback.c: the next sync round fails with it). */
enum walfs_fault_op { WALFS_FAULT_WRITE = 1, WALFS_FAULT_SYNC = 2, WALFS_FAULT_ALLOC = 3, WALFS_FAULT_RECLAIM = 4, WALFS_FAULT_WRITEBACK = 5,
                      WALFS_FAULT_CAT_SPLIT = 6 };
/* CAT_SPLIT: a crash between the catalog copies' writes (catalog version 3). The catalog
 * append it hits writes and syncs streams.cat only, not its mirror, then fails the WAL
 * with -err as if the process died there; abandon the handle with walfs_debug_power_cut. */
/* After `after` more successful ops of that kind, fail the next `count` (-1: all) with -err. */
int walfs_debug_fail(walfs_t *wal, int op, int err, int64_t after, int64_t count);
/* A slow disk: the next sync round that has files to sync sleeps ms milliseconds before it
 * syncs them (once). */
int walfs_debug_slow_sync(walfs_t *wal, uint32_t ms);
/* Simulates power loss: every 4 KiB page written since its file's last successful sync
 * reverts to its synced content, except pages kept by chance (keep_permille / 1000);
 * then the handle is freed without syncing. */
int walfs_debug_power_cut(walfs_t *wal, uint64_t seed, uint32_t keep_permille);
/* The writeback thread's counts since open (csrc/writeback.c). */
typedef struct walfs_writeback_stats {
    uint64_t queued;        /* ranges appends handed over (a range that extended the last queued one counts) */
    uint64_t refused;       /* offers not taken (queue full; a nowait append finding its lock held) */
    uint64_t done;          /* ranges written back */
    uint64_t failed;        /* of them, failed (the next sync round fails) */
    uint64_t max_queue_ns;  /* the longest an appending thread spent handing a range over */
} walfs_writeback_stats_t;
/* Waits until the writeback thread has written back every range handed to it so far,
 * then its counts. -EROFS on a read-only WAL (no thread). Any mode, not only test mode. */
int walfs_debug_writeback_wait(walfs_t *wal, walfs_writeback_stats_t *out);

#endif
