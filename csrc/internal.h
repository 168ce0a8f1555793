/* internal.h: structures shared by the C files of the core; never seen by Python. */
#ifndef WALFS_INTERNAL_H
#define WALFS_INTERNAL_H

#define _GNU_SOURCE
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/uio.h>

#include "walfs.h"
#include "walfs_debug.h" /* the fault hooks (fault_hit) and the writeback counts */

#define FORMAT_VERSION 1 /* run headers of block runs */
#define RUN_VERSION_SMALL 2 /* run headers of small runs and carve headers (format.c "Small runs") */
#define SEG_HDR_VERSION 1 /* the segment header's own version (its layout is unchanged) */
#define CAT_VERSION 3    /* streams.cat: 2 adds SEGMENT / SEGMENT_GONE entries, 3 the mirror copy
                            and location-bound entries (format.c) */
#define CAT_HDR_SIZE 64
#define SEG_HDR_SIZE 4096
#define BLK_HDR_SIZE 128
#define BLK_SEAL_OFF 512
#define BLK_FRONTIER_OFF 256 /* frontier.c: durable count of an unsealed run */
#define BLK_DATA_OFF 1024
#define BLK_CARVE_OFF 128    /* a carved block's carve header (between slot 0's open and frontier headers) */
#define SMALL_RUN_MIN 4096u  /* the first size class; each next one is SMALL_RUN_GROWTH times larger */
#define SMALL_RUN_GROWTH 4u
#define SMALL_SLOTS_MIN 4u   /* a class exists while a block holds at least this many of its runs */
#define REC_HDR_SIZE 36
#define SLOT_SIZE 12
#define MAX_NAME 255
#define MAX_SEGMENT_SIZE (2ull << 30)
#define MIN_BLOCK_SIZE 4096
#define STREAM_CHUNK 1024
#define STREAM_CHUNKS 4096

enum { CAT_DEFINE = 1, CAT_TRIM = 2, CAT_FLOOR = 3, CAT_OPEN = 4, CAT_DELETE = 5, CAT_SEGMENT = 6, CAT_SEGMENT_GONE = 7 };
/* gid = epoch << GID_EPOCH_SHIFT | sequence: every writer open starts a new epoch, so a
 * gid never repeats and stale bytes from an earlier epoch never pass as newer records. */
#define GID_EPOCH_SHIFT 40
enum { BLK_KIND_OPEN = 1, BLK_KIND_SEAL = 2, BLK_KIND_FRONTIER = 3, BLK_KIND_CARVE = 4 };
/* A frontier header's flag (byte 72): no record below its count is known damaged, so an open
 * trusts them as it trusts a sealed run's (frontier.c). */
#define FRONTIER_CLEAN 1u
enum { BS_FREE = 0, BS_HEAD = 1, BS_TAIL = 2, BS_CARVED = 3 };

typedef struct walfs walfs_t;
typedef struct segment segment_t;

/* A carved block (allocator.c): cut into n_slots small runs of class_size bytes each. A
 * block once carved stays carved until its segment file goes. */
typedef struct carve {
    uint64_t carve_id;      /* the carve header's (epoch << 32 | a count of this open's carves) */
    uint32_t class_size, n_slots, n_used;
    uint64_t used[];        /* bit per slot */
} carve_t;

/* A segment file as the catalog lists it (catalog v2). */
typedef struct cat_seg {
    uint64_t id;
    uint64_t created_ms;    /* catalog v3: the segment header's creation time (0: not known) */
    int gone;               /* a SEGMENT_GONE entry: reclamation deletes (or deleted) the file */
} cat_seg_t;

/* Test mode: content of 4 KiB pages as of their file's last successful sync. */
typedef struct page_save {
    uint64_t page;
    uint8_t *data;
} page_save_t;

struct segment {
    uint64_t id;
    uint64_t created_ms;    /* from its header (kept in its v3 SEGMENT entry) */
    int fd;
    uint8_t *map;           /* read-only view of the whole file */
    uint8_t *wmap;          /* writable view for small appends (seg_mwritev); MAP_FAILED when read-only */
    uint64_t size;
    uint32_t n_blocks;
    uint8_t *block_state;   /* BS_* per block; under wal->lock */
    carve_t **carves;       /* per block: its carve when BS_CARVED, else NULL; under wal->lock */
    uint32_t small_used;    /* small runs in use, over all its carved blocks; under wal->lock */
    int cleaning;           /* reclaim.c's cleaner copies its small runs out: no run is allocated here */
    atomic_int dirty;
    atomic_int wb_err;      /* a failed writeback (writeback.c): the next sync round fails with it */
    /* budget.c's scratch tally of one stream's runs here; under wal->lock */
    uint64_t tally_mark;
    uint32_t tally_runs;
    int tally_kept, tally_charged;
    /* test mode only; under saves_lock */
    pthread_mutex_t saves_lock;
    page_save_t *saves;
    size_t n_saves, cap_saves;
};

/* Records of a run that recovery quarantined: indexes [lo, hi) of the run (recovery.c). */
typedef struct quar_range {
    uint64_t lo, hi;
} quar_range_t;

/* One per run of every stream (100,000 streams hold at least one each): fields ordered so
 * that none pads (184 bytes: a 192-byte malloc chunk). */
typedef struct block {
    segment_t *seg;
    uint32_t index;         /* first block of the run */
    uint32_t n_blocks;      /* 0 for a small run (one slot of a carved block) */
    uint32_t slot;          /* a small run's slot in its carved block */
    uint32_t stream_no;
    uint64_t src_seg;       /* a small run copied by the cleaner (reclaim.c): the segment it was copied from */
    uint64_t run_size;
    uint64_t file_off;      /* of the run in the segment file */
    uint64_t first_offset, first_byte, first_gid;
    /* published state, under the stream's lock */
    uint64_t count, data_end, byte_len, last_gid;
    int64_t first_ts, last_ts;
    uint64_t frontier_count; /* records its frontier header claims durable (frontier.c) */
    /* handed to the writeback thread (writer.c writeback_run), under the append_lock: the
     * run's bytes below wb_end, and wb_slots bytes of index slots at its end */
    uint64_t wb_end, wb_slots;
    uint64_t durable_count;  /* at open: the frontier found on disk (recovery.c) */
    uint64_t durable_end;    /* at open: the frontier's data_end, where record durable_count starts */
    /* Damaged records (recovery.c, "quarantine"): sorted, disjoint index ranges that every
     * read refuses (record_locate: -EBADMSG). Set at open only, before the stream is
     * published; freed with the run (block_free). A run holding any is never sealed
     * (sync.c write_seals writes its frontier instead), so every open finds them again. */
    quar_range_t *quar;
    uint32_t n_quar;
    uint8_t sealed;          /* seal header written */
    uint8_t full;            /* takes no more records */
    uint8_t dirty_tail;      /* at open: bytes follow its last record (zeroed once the stream is judged) */
    uint8_t frontier_clean;  /* at open: its frontier header carries FRONTIER_CLEAN (frontier.c) */
} block_t;

/* One per stream (100,000 topics: 100,000 of them): fields ordered so that none pads, and
 * allocated to fit its name (stream_new: offsetof(stream_t, name) + name_len + 1). */
typedef struct stream {
    pthread_mutex_t append_lock; /* one append at a time; held across its writes */
    pthread_mutex_t lock;        /* published state and the blocks array; held briefly */
    uint32_t no;
    uint32_t partition;
    int deleted;            /* a DELETE entry: no appends, no name; its runs go like trimmed ones */
    uint32_t file_cap;      /* budget.c: at most this many charged segment files (0: no cap); under wal->lock */
    uint64_t org_id;
    uint8_t hash[16];
    block_t **blocks;       /* in offset order */
    size_t n_blocks, cap_blocks;
    uint64_t low_offset;
    uint64_t next_offset, next_byte;
    uint64_t floor_offset, floor_byte; /* the highest FLOOR in the catalog (kept by compaction) */
    uint64_t durable_offset, durable_byte; /* what the last successful sync made durable (sync.c) */
    int64_t last_ts;
    uint64_t written_bytes; /* under lock: bytes its appends wrote into segment files (walfs_disk_stats) */
    uint16_t name_len;
    char name[];            /* name_len bytes and a NUL: allocated to fit (stream_new), so that a
                               stream costs its name, not MAX_NAME + 1 bytes (100,000 topics) */
} stream_t;

typedef struct pending_seal {
    block_t *block;
    uint64_t ticket;        /* the run may be sealed once this ticket is durable */
} pending_seal_t;

/* A range of a segment file whose writeback the writeback thread starts (writeback.c). */
typedef struct wb_range {
    segment_t *seg;
    uint64_t off, len;
} wb_range_t;
#define WB_QUEUE 64

typedef struct fault {
    atomic_llong after;
    atomic_llong count;
    atomic_int err;
} fault_t;

struct walfs {
    char dir[4096];
    int dirfd;
    int lockfd;
    walfs_options_t opt;
    uint64_t uuid;
    uint32_t crc_seed;
    uint32_t blocks_per_seg;

    /* Lock order: stream append_lock > stream lock > seal_lock; append_lock > wal lock >
     * stream lock (reclaim). gid_lock and sync_lock are leaves. */
    pthread_mutex_t lock;   /* segments, allocator, catalog, stream table */
    pthread_mutex_t seal_lock; /* pending seals, block->sealed */
    segment_t **segs;
    size_t n_segs, cap_segs;
    uint64_t next_seg_id;
    stream_t **chunks[STREAM_CHUNKS]; /* stream_no -> stream, STREAM_CHUNK per chunk */
    atomic_size_t n_streams;          /* published after the stream is complete */
    uint32_t *stream_ix;              /* catalog.c stream_find: stream_no + 1 by identity, 0: empty */
    size_t stream_ix_cap, stream_ix_used; /* under wal->lock (or during open) */
    int cat_fd;             /* streams.cat (copy 0); a read-only open: the copy it reads (cat_copy) */
    int cat_fd2;            /* streams.cat.mirror (copy 1) of a writer's v3 catalog, else -1 */
    uint32_t cat_copy;      /* the copy cat_fd holds */
    uint64_t cat_gen;       /* v3: the generation in both copies' headers (compaction raises it) */
    uint32_t cat_found;     /* the catalog version as found at open (the report's catalog_version) */
    uint8_t cat_hdr[CAT_HDR_SIZE]; /* the header in use (compaction rewrites it) */
    int cat_heal;           /* v3 copies (bit per copy) or segment headers open found damaged */
    uint64_t cat_end;
    uint64_t cat_torn;      /* bytes of a torn last entry after cat_end, cut after recovery */
    uint64_t cat_torn2;     /* the same in the mirror */
    struct io_uring cat_ring; /* syncs both catalog copies at once (catalog.c); under wal->lock */
    int cat_ring_state;     /* 0 not tried, 1 ready, -1 unavailable */
    int64_t last_mark_ms;   /* durable-end marks written by a sync round (sync.c); sync leader only */
    uint64_t cat_entries;   /* entries in streams.cat (compaction rewrites it when mostly dead) */
    uint64_t floor_gid;     /* the highest FLOOR next_gid in the catalog */
    uint32_t cat_version;   /* of streams.cat as read at open (1: upgraded at close) */
    cat_seg_t *cat_segs;    /* segment files the catalog lists (SEGMENT / SEGMENT_GONE); open only */
    size_t n_cat_segs, cap_cat_segs;
    uint64_t *check_floors; /* recovery only: per stream number, the FLOOR its runs must reach
                               (catalog v2; recovery.c short_of_floor), as read before the scan */
    size_t n_check_floors;
    pending_seal_t *seals;
    size_t n_seals, cap_seals;

    pthread_mutex_t gid_lock;
    uint64_t next_gid;
    uint64_t epoch;         /* from the catalog's last OPEN entry */
    uint32_t carve_seq;     /* blocks carved by this open (allocator.c; under wal->lock) */

    /* group commit */
    pthread_mutex_t sync_lock;
    pthread_cond_t sync_cond;
    int sync_running;
    int64_t last_round_ms;  /* when the last sync round started (sync.c mono_ms); under sync_lock */
    uint64_t durable_ticket;
    atomic_ullong ticket;
    atomic_int failed;
    atomic_ullong syncs;
    /* walfs_disk_stats: each round's fsync time (sync.c); written by the round's leader */
    atomic_ullong fsync_counts[WALFS_FSYNC_BUCKETS + 1];
    atomic_ullong fsync_sum_ns;
    struct io_uring ring;
    int have_ring;

    /* interval syncs */
    pthread_t syncer;
    int syncer_started;
    int syncer_stop;        /* under sync_lock */
    pthread_cond_t syncer_cond;

    /* writeback.c: the writeback thread and its queue; wb_lock is a leaf */
    pthread_mutex_t wb_lock;
    pthread_cond_t wb_cond;      /* a range queued, or stop */
    pthread_cond_t wb_idle_cond; /* a range done (wb_forget, walfs_debug_writeback_wait) */
    wb_range_t wb_q[WB_QUEUE];
    size_t wb_head, wb_n;
    segment_t *wb_busy;          /* whose range the thread is writing back now */
    walfs_writeback_stats_t wb_stats; /* under wb_lock */
    pthread_t wb_thread;
    int wb_inited, wb_started, wb_stop;
    int wb_waiting;              /* the thread waits on wb_cond: a queued range signals it */

    fault_t faults[7];
    _Atomic uint32_t slow_sync_ms; /* the next round sleeps this long first (walfs_debug_slow_sync) */
    uint64_t tally_mark;     /* budget.c: the last scratch tally's mark; under wal->lock */
    walfs_recovery_report_t report;
    char damage[1024];       /* the first damage recovery found, for walfs_open's error */
};

typedef struct cat_entry {
    uint16_t type;
    uint32_t stream_no, partition;
    uint64_t org_id;
    uint8_t hash[16];
    uint16_t name_len;
    char name[MAX_NAME + 1];
    uint64_t a, b, c;
} cat_entry_t;

typedef struct blk_hdr {
    uint32_t n_blocks, stream_no;
    uint32_t version;       /* 1: a block run; 2: a small run (run_size, slot) or a carve header */
    uint64_t run_size;      /* version 2: the run's size (a carve header: its class size) */
    uint32_t slot;          /* version 2: the run's slot in its carved block */
    uint64_t src_seg;       /* version 2: a cleaner's copy: the segment of its original (0: none) */
    uint64_t carve_id;      /* version 2: the carve the run lies in (a carve header: its own) */
    uint64_t first_offset, first_byte, first_gid;
    uint64_t count, last_gid, data_end, byte_len;
    int64_t first_ts, last_ts;
    uint32_t flags;         /* a frontier header's: FRONTIER_CLEAN */
} blk_hdr_t;

typedef struct rec_hdr {
    uint32_t crc, value_len, meta_len, batch_left, stream_no;
    uint64_t gid;
    int64_t ts;
} rec_hdr_t;

/* A record located in a mapped block: its header's address, and the header parsed. Readers'
 * queues of records to check begin each entry with one (fmt_rec_check_q). */
typedef struct rec_at {
    const uint8_t *p;
    rec_hdr_t r;
} rec_at_t;

typedef struct slot {
    uint32_t pos, gid_delta, view_delta;
} slot_t;

/* crc32c.c */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
/* out[k] = crc32c(crc, bufs[k], lens[k]) for k < 4, computed interleaved (~3x faster). */
void crc32c_x4(uint32_t crc, const uint8_t *const *bufs, const size_t *lens, uint32_t *out);

/* format.c */
uint32_t crc_seed_for(uint64_t uuid);
void fmt_cat_header(uint8_t *out, uint64_t uuid, uint64_t created_ms, uint64_t segment_size, uint32_t block_size,
                    uint64_t generation, uint32_t copy);
int fmt_cat_header_parse(const uint8_t *in, uint64_t *uuid, uint64_t *segment_size, uint32_t *block_size);
uint32_t fmt_cat_header_version(const uint8_t *in);
uint64_t fmt_cat_header_generation(const uint8_t *in);
uint32_t fmt_cat_header_copy(const uint8_t *in);
void fmt_cat_header_set(uint8_t *hdr, uint64_t generation, uint32_t copy);
uint32_t fmt_cat_loc_seed(uint32_t seed, uint32_t copy, uint64_t off, uint64_t generation);
void fmt_cat_bind(uint8_t *entry, uint32_t seed, uint32_t copy, uint64_t off, uint64_t generation);
size_t fmt_cat_entry_len(const uint8_t *entry);
size_t fmt_cat_segment(uint8_t *out, uint32_t seed, uint16_t type, uint64_t seg_id, uint64_t created_ms);
size_t fmt_cat_define(uint8_t *out, uint32_t seed, const stream_t *s);
size_t fmt_cat_trim(uint8_t *out, uint32_t seed, uint32_t stream_no, uint64_t low_offset);
size_t fmt_cat_floor(uint8_t *out, uint32_t seed, uint32_t stream_no, uint64_t next_offset,
                     uint64_t next_byte, uint64_t next_gid);
size_t fmt_cat_open(uint8_t *out, uint32_t seed, uint64_t epoch);
size_t fmt_cat_delete(uint8_t *out, uint32_t seed, uint32_t stream_no);
size_t fmt_cat_entry_parse(const uint8_t *in, size_t avail, uint32_t seed, cat_entry_t *e, const char **why);
#define CAT_MAX_ENTRY (42 + MAX_NAME) /* the longest entry: a DEFINE with a 255-byte name */
void fmt_seg_header(uint8_t *out, const walfs_t *wal, uint64_t seg_id, uint32_t n_blocks, uint64_t created_ms);
int fmt_seg_header_parse(const uint8_t *in, const walfs_t *wal, uint64_t seg_id, uint64_t *seg_size,
                         uint32_t *block_size, uint32_t *n_blocks, uint64_t *created_ms);
void fmt_blk_open(uint8_t *out, const walfs_t *wal, const block_t *b);
void fmt_blk_seal(uint8_t *out, const walfs_t *wal, const block_t *b);
void fmt_blk_frontier(uint8_t *out, const walfs_t *wal, const block_t *b, uint64_t count, uint64_t data_end);
void fmt_blk_carve(uint8_t *out, const walfs_t *wal, uint64_t seg_id, uint32_t index, uint32_t class_size,
                   uint64_t carve_id);
int fmt_blk_parse(const uint8_t *in, const walfs_t *wal, uint64_t seg_id, uint32_t index, uint16_t kind,
                  blk_hdr_t *h);
void fmt_rec_header(uint8_t *out, uint32_t value_len, uint64_t gid, int64_t ts, uint32_t meta_len,
                    uint32_t batch_left, uint32_t stream_no);
void fmt_rec_seal(uint8_t *hdr, uint32_t seed, const uint8_t *body, size_t body_len);
void fmt_rec_seal_x4(uint8_t *const *hdr, uint32_t seed, const size_t *body_len);
void fmt_rec_parse(const uint8_t *in, rec_hdr_t *r);
int fmt_rec_check(const uint8_t *in, uint32_t seed, const rec_hdr_t *r);
int fmt_rec_check_q(const void *q, size_t stride, uint32_t seed, int n);
void fmt_slot(uint8_t *out, uint32_t pos, uint32_t gid_delta, uint32_t view_delta);
void fmt_slot_parse(const uint8_t *in, slot_t *s);

/* budget.c: 0, or -EDQUOT if a new run of the stream in seg (NULL: a new segment) passes its file cap; under wal->lock */
int budget_check(walfs_t *wal, uint32_t stream_no, const segment_t *seg);

/* io.c: every write to a segment goes through here (faults, power-loss tracking) */
int64_t now_ms(void);
void wal_log(const walfs_t *wal, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* writer.c: bodies[i] for records whose bodies lie back to back in the concatenation of
 * n_pieces buffers (walfs_append_pieces; kafka_batch.c's walfs_kafka_batch_pieces). */
int bodies_from_pieces(uint32_t n, uint32_t n_pieces, const uint8_t *const *pieces, const uint64_t *piece_lens,
                       const uint32_t *meta_lens, const uint32_t *value_lens, const uint8_t **bodies, uint8_t **joined);
/* Routine events (catalog compaction): INFO level. */
void wal_info(const walfs_t *wal, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs at error level (damage the open survives: a quarantined record). */
void wal_error(const walfs_t *wal, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs at error level and keeps the first such message for the open's error text. */
void wal_damage(walfs_t *wal, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int fault_hit(walfs_t *wal, int op);
int seg_pwritev(walfs_t *wal, segment_t *seg, const struct iovec *iov, int cnt, uint64_t off);
int seg_pwrite(walfs_t *wal, segment_t *seg, const void *buf, size_t len, uint64_t off);
int seg_mwritev(walfs_t *wal, segment_t *seg, const struct iovec *iov, int cnt, uint64_t off);
int seg_zero(walfs_t *wal, segment_t *seg, uint64_t off, uint64_t len);
void seg_synced(walfs_t *wal, segment_t *seg, size_t n_saves_before);
int fsync_dir(int dirfd);
void saves_free(segment_t *seg);

/* segment.c */
int seg_create(walfs_t *wal, segment_t **out);
int seg_open(walfs_t *wal, uint64_t id, segment_t **out);
void seg_free(segment_t *seg);
int seg_delete(walfs_t *wal, segment_t *seg);
int seg_add(walfs_t *wal, segment_t *seg);
void seg_path(const walfs_t *wal, uint64_t id, char *out, size_t outlen);

/* catalog.c */
int cat_open(walfs_t *wal);
int cat_append(walfs_t *wal, const uint8_t *buf, size_t len);
int cat_append_n(walfs_t *wal, const uint8_t *buf, size_t len, uint64_t n_entries);
int cat_note_segment(walfs_t *wal, uint64_t seg_id, uint64_t created_ms);
int cat_close(walfs_t *wal);
int cat_cut_torn(walfs_t *wal);
int cat_mark_ends(walfs_t *wal);
#define MARK_INTERVAL_MS 1000 /* sync rounds write durable-end marks at most this often */
cat_seg_t *cat_seg_find(const walfs_t *wal, uint64_t id);
int cat_new_epoch(walfs_t *wal);
int cat_refresh(walfs_t *wal);
int cat_compact_if_due(walfs_t *wal);
int cat_heal_upgrade(walfs_t *wal, int v1_too);
void cat_ring_free(walfs_t *wal);
stream_t *stream_get(walfs_t *wal, uint32_t no);
stream_t *stream_new(walfs_t *wal, uint32_t name_len);
int stream_index_reserve(walfs_t *wal);
void stream_index_add(walfs_t *wal, const stream_t *s);
stream_t *stream_find(walfs_t *wal, uint64_t org_id, uint32_t partition, const uint8_t *topic_hash);
void stream_free(stream_t *s);
int stream_add_block(stream_t *s, block_t *b);

/* allocator.c */
/* run_size: a size class (small_class), or a whole number of blocks (run_size_for). */
int alloc_run(walfs_t *wal, uint32_t stream_no, uint64_t run_size, block_t **out);
/* As alloc_run, but -EAGAIN where alloc_run would create a segment (walfs_append_nowait). */
int alloc_run_existing(walfs_t *wal, uint32_t stream_no, uint64_t run_size, block_t **out);
void release_run(walfs_t *wal, block_t *b);
uint32_t blocks_needed(const walfs_t *wal, uint64_t bytes);
/* The size of a stream's next run: prev is its last run's size (0: none), need the bytes
 * the record that opens it takes (header, body, slot). */
uint64_t run_size_for(const walfs_t *wal, uint64_t prev, uint64_t need);
/* The size a stream's next run grows from after its last run (allocator.c). */
uint64_t run_growth_base(const walfs_t *wal, uint64_t run_size, uint64_t used);
/* 1 if size is one of the WAL's small-run classes. */
int small_class(const walfs_t *wal, uint64_t size);
/* Recovery: marks block i of seg carved with class_size (0, or -ENOMEM); marks slot used. */
int carve_mark(walfs_t *wal, segment_t *seg, uint32_t i, uint32_t class_size, uint64_t carve_id);
/* madvise(MADV_RANDOM) over carved block i of seg, in both mappings (allocator.c). */
void carve_advise(const walfs_t *wal, const segment_t *seg, uint32_t i);
void carve_use_slot(segment_t *seg, uint32_t i, uint32_t slot);
/* Runs in use in seg: block runs and small runs (reclaim.c, budget.c). */
uint32_t seg_runs_used(const segment_t *seg);
/* Reserves (fallocate) blocks [first, first + n) of seg before a run is put there. */
int seg_reserve(walfs_t *wal, segment_t *seg, uint32_t first, uint32_t n);

/* sync.c */
int sync_init(walfs_t *wal);
void sync_shutdown(walfs_t *wal);
int wait_durable(walfs_t *wal, uint64_t ticket);
uint64_t take_ticket(walfs_t *wal);
void seal_later(walfs_t *wal, block_t *b, uint64_t ticket);
int sync_force(walfs_t *wal);
int exclusive_begin(walfs_t *wal);
void exclusive_end(walfs_t *wal);
void durable_init(walfs_t *wal);

/* writeback.c: the writeback of appended ranges, started by a thread of its own */
int wb_start(walfs_t *wal);
void wb_stop(walfs_t *wal);
/* Hands [off, off+len) of seg to the writeback thread: 0, or -EAGAIN when not taken (the
 * queue is full, no thread, or with nowait its lock is held): the caller offers it again later. */
int wb_queue(walfs_t *wal, segment_t *seg, uint64_t off, uint64_t len, int nowait);
/* Before seg's fd closes: drops its queued ranges and waits for the one in flight. */
void wb_forget(walfs_t *wal, segment_t *seg);

/* reader.c */
const uint8_t *run_ptr(const block_t *b, uint64_t rel);
void slot_get(const block_t *b, uint64_t i, slot_t *s);
int record_locate(const block_t *b, uint64_t idx, const uint8_t **p, rec_hdr_t *r);
/* 1 if record idx of run b is quarantined (recovery found it damaged). */
int block_quarantined(const block_t *b, uint64_t idx);
/* Adds record idx to run b's quarantined records: 0 or -ENOMEM. */
int block_quarantine(block_t *b, uint64_t idx);
/* Frees a run's memory (its quarantine list included). */
void block_free(block_t *b);
size_t find_block_by_offset(const stream_t *s, uint64_t offset);
uint64_t stream_low_byte(const stream_t *s);

/* guard.c: a SIGBUS on mapped segment data becomes -EIO for the call that touched it.
 * Usage, with the stream lock (or NULL) the call holds:
 *     pthread_mutex_lock(&s->lock);
 *     GUARD_BEGIN(&s->lock, return -EIO);
 *     ... reads of the mapping; every path out passes GUARD_END() ...
 *     GUARD_END();
 *     pthread_mutex_unlock(&s->lock);                                               */
typedef struct guard {
    sigjmp_buf jb;
} guard_t;
void guard_install(void);
guard_t *guard_get(void);
void guard_set(guard_t *g);
#define GUARD_BEGIN(held, on_fault)                                  \
    guard_t guard_;                                                  \
    guard_t *const guard_prev_ = guard_get();                       \
    if (sigsetjmp(guard_.jb, 1)) {                                   \
        guard_set(guard_prev_);                                      \
        pthread_mutex_t *guard_held_ = (held);                       \
        if (guard_held_) pthread_mutex_unlock(guard_held_);          \
        on_fault;                                                    \
    }                                                                \
    guard_set(&guard_)
#define GUARD_END() guard_set(guard_prev_)

/* frontier.c: sync.c calls these around each sync round */
typedef struct frontier frontier_t;
frontier_t *frontier_snapshot(walfs_t *wal);
void frontier_record(walfs_t *wal, frontier_t *f);
void frontier_free(frontier_t *f);

/* recovery.c */
int recover(walfs_t *wal);
uint32_t seg_next_data_block(const walfs_t *wal, const segment_t *seg, uint32_t i);

#endif
