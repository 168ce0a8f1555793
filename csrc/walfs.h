/*
 * walfs.h: the one boundary between the C core and Python.
 *
 * Every function returns 0 (or a count) on success and a negative errno on failure.
 * No process-global state but the log callback (walfs_set_log) and the SIGBUS guard
 * (csrc/guard.c): every other piece of state hangs off a walfs_t, so several WALs
 * can be open in one process and different streams append in parallel.
 *
 * Error codes with a walfs meaning:
 *   -EAGAIN   the data directory is locked by another process
 *   -EBADMSG  a record or header failed its CRC (corruption)
 *   -EUCLEAN  the directory is damaged in a way recovery will not guess about
 *   -EIO      an I/O error; after a failed fsync every append returns -EIO until reopen
 *   -ENOSPC   no space for a new segment; the WAL stays usable
 *   -EDQUOT   the stream is at its file cap (walfs_stream_set_file_cap): nothing was
 *             appended; retention must trim and reclaim first
 *   -EMSGSIZE a record does not fit in a segment
 *   -ERANGE   an offset or byte position outside the stream's retained range
 *   -EROFS    a write on a read-only WAL
 */
#ifndef WALFS_H
#define WALFS_H

#include <stddef.h>
#include <stdint.h>

typedef struct walfs walfs_t;

enum walfs_fsync_mode { WALFS_FSYNC_NEVER = 0, WALFS_FSYNC_INTERVAL = 1, WALFS_FSYNC_ALWAYS = 2 };

typedef struct walfs_options {
    uint64_t segment_size;       /* bytes per segment file (default 1 GiB, max 2 GiB) */
    uint32_t block_size;         /* bytes per block (default 10 MiB) */
    int32_t fsync_mode;          /* enum walfs_fsync_mode */
    uint32_t fsync_interval_ms;  /* for WALFS_FSYNC_INTERVAL (default 100) */
    int32_t read_only;           /* no lock, no writes, in-memory recovery only */
    int32_t test_mode;           /* track unsynced writes for walfs_debug_power_cut */
    int32_t no_io_uring;         /* force the fdatasync fallback */
    uint64_t min_free_bytes;     /* a new segment is refused (-ENOSPC) if it would leave less
                                    free space than this on the file system (0: no reserve) */
} walfs_options_t;

typedef struct walfs_stream_info {
    uint32_t stream_no;
    uint32_t partition;
    uint64_t org_id;
    uint8_t topic_hash[16];
    uint16_t name_len;
    char name[256];
    uint64_t low_offset;    /* trimmed below this */
    uint64_t first_offset;  /* first record still stored (>= low_offset after reclaim) */
    uint64_t next_offset;   /* high watermark */
    uint64_t low_byte;      /* view byte position of low_offset (or first stored record) */
    uint64_t next_byte;     /* view byte size */
    uint64_t first_gid;     /* gid of the first stored record (UINT64_MAX if none) */
    uint32_t deleted;       /* walfs_stream_delete'd: the number stays, the name is free */
} walfs_stream_info_t;

/* One record returned by a read. data points into the caller's buffer. */
typedef struct walfs_rec {
    uint64_t gid;
    uint64_t offset;
    int64_t timestamp_ms;
    uint32_t meta_len;   /* bytes of key/headers encoding before the value */
    uint32_t value_len;
    uint64_t buf_pos;    /* where meta || value starts in the caller's buffer */
} walfs_rec_t;

typedef struct walfs_recovery_report {
    uint64_t segments;
    uint64_t blocks;
    uint64_t records;
    uint64_t verified_records;   /* records checked by CRC at open (unsealed tails) */
    uint64_t cut_records;        /* torn or incomplete-batch records removed from tails */
    uint64_t cut_bytes;
    uint64_t freed_blocks;
    uint64_t syncs;              /* since open: fsync rounds (one round syncs every dirty file) */
    uint64_t catalog_version;    /* of streams.cat as found at open (1: upgraded at a writer's clean close) */
} walfs_recovery_report_t;

/* The disk as the WAL's appends and syncs use it, since open (for Prometheus: etcd's
 * etcd_disk_wal_fsync_duration_seconds and etcd_disk_wal_write_bytes_total). Each sync
 * round (every dirty segment file fdatasync'ed, in parallel through io_uring when there
 * are several; csrc/sync.c) is timed once, from its start to its last completion: the
 * time appenders waiting for durability waited on the disk. fsync_counts[i] counts the
 * rounds that took at most fsync_le_ns[i] (and more than the bound before); the last
 * count is the rounds slower than every bound. Counts per bucket, not cumulative. */
enum { WALFS_FSYNC_BUCKETS = 17 };
typedef struct walfs_disk_stats {
    uint64_t fsync_le_ns[WALFS_FSYNC_BUCKETS]; /* 100 us, 250 us, 500 us, then 1 ms * 2^k up to 8.192 s */
    uint64_t fsync_counts[WALFS_FSYNC_BUCKETS + 1];
    uint64_t fsync_sum_ns;
    uint64_t write_bytes;   /* bytes appends wrote into segment files: run headers, record
                               headers, keys/headers/values and index slots (not seals,
                               frontier marks or the catalog) */
} walfs_disk_stats_t;

void walfs_default_options(walfs_options_t *opts);
int walfs_open(const char *dir, const walfs_options_t *opts, walfs_t **out, char *err, size_t errlen);
/* Makes everything durable, writes seals and frees the handle (also on error). */
int walfs_close(walfs_t *wal);
int walfs_recovery_report(walfs_t *wal, walfs_recovery_report_t *out);
int walfs_disk_stats(walfs_t *wal, walfs_disk_stats_t *out);
/* 0 while healthy; the negative errno of the fsync that failed otherwise. */
int walfs_failed(walfs_t *wal);

/* Streams: (org_id, partition, topic_hash) identifies one; name is kept for listing. */
int walfs_stream_open(walfs_t *wal, uint64_t org_id, uint32_t partition, const uint8_t *topic_hash,
                      const char *name, uint32_t name_len, int create, uint32_t *stream_no);
int walfs_stream_count(walfs_t *wal);
int walfs_stream_info(walfs_t *wal, uint32_t stream_no, walfs_stream_info_t *out);
/* The stream's byte view size (next_byte), or -ENOENT: the cheap call behind st_size. */
int64_t walfs_stream_next_byte(walfs_t *wal, uint32_t stream_no);
/* Appends n records: body i is meta_i || value_i, bodies concatenated in data.
 * Each record is stamped with its append time (ms, never decreasing within a stream).
 * The records form one batch: a crash keeps all or none.
 * Gids are first_gid .. first_gid+n-1 and offsets first_offset .. first_offset+n-1.
 * *ticket names the append for walfs_wait_durable. With WALFS_FSYNC_ALWAYS and wait != 0
 * it returns once the batch is durable; with wait == 0 the caller waits itself (so that
 * it can release its own locks first and let other appenders join the same fsync). */
int walfs_append(walfs_t *wal, uint32_t stream_no, uint32_t n, const uint8_t *data,
                 const uint32_t *meta_lens, const uint32_t *value_lens, int wait, uint64_t *first_gid,
                 uint64_t *first_offset, uint64_t *ticket);
/* As walfs_append, but the bodies come in n_pieces buffers (pieces[k], piece_lens[k]
 * bytes): the records' bodies lie back to back in the pieces' concatenation, and a body
 * may span pieces (it is then copied, joined; the others are written from the pieces).
 * -EINVAL, with nothing appended, unless the pieces hold exactly the bodies' bytes. For a
 * caller whose records are already in several buffers (the Spark sink: a marker's meta
 * section, then a column of values), which would otherwise join them first. */
int walfs_append_pieces(walfs_t *wal, uint32_t stream_no, uint32_t n, uint32_t n_pieces,
                        const uint8_t *const *pieces, const uint64_t *piece_lens, const uint32_t *meta_lens,
                        const uint32_t *value_lens, int wait, uint64_t *first_gid, uint64_t *first_offset,
                        uint64_t *ticket);
/* As walfs_append with wait == 0, but it never waits on the disk or on another appender:
 * -EAGAIN, with nothing appended, when the batch would need a new segment (created and
 * fsynced under the WAL's lock), a new gid epoch (a catalog write and fsync), or a lock
 * another thread holds (the stream's append lock, the WAL's lock for a new run). What it
 * does is plan runs in existing segments and copy the records into the page cache. For a
 * caller on an event loop (the Kafka listener's produce), which appends on a worker
 * thread only when this refuses. */
int walfs_append_nowait(walfs_t *wal, uint32_t stream_no, uint32_t n, const uint8_t *data,
                        const uint32_t *meta_lens, const uint32_t *value_lens, uint64_t *first_gid,
                        uint64_t *first_offset, uint64_t *ticket);
/* Appends one plain record (no meta section) of len bytes; with wait, under
 * fsync="always", returns once it is durable. Returns its offset, or a negative errno. */
int64_t walfs_append_one(walfs_t *wal, uint32_t stream_no, const char *value, uint32_t len, int wait);
/* Appends the lines of data (split on '\n'; a final '\n' ends the last line, it does not
 * start an empty one) as one batch of plain records; *n_out is the number of lines. */
int walfs_append_lines(walfs_t *wal, uint32_t stream_no, const uint8_t *data, uint64_t len, int wait,
                       uint64_t *first_gid, uint64_t *first_offset, uint64_t *ticket, uint32_t *n_out);
/* Waits until the append with this ticket is durable (group commit). */
int walfs_wait_durable(walfs_t *wal, uint64_t ticket);
/* Makes every append that returned before this call durable (group commit). */
int walfs_sync(walfs_t *wal);
/* A stream's watermarks in one cheap call. Every record below durable_offset (view bytes
 * below durable_byte) survives power loss: it is where the last successful sync left the
 * stream (recovery's result at open; in a read-only WAL, everything it sees). Always
 * durable_offset <= next_offset; raised by walfs_sync, fsync=always appends and interval
 * syncs. */
typedef struct walfs_marks {
    uint64_t low_offset, next_offset, durable_offset;
    uint64_t next_byte, durable_byte;
} walfs_marks_t;
int walfs_stream_marks(walfs_t *wal, uint32_t stream_no, walfs_marks_t *out);

/* Reads records from the one with gid start_gid on (it must belong to the stream).
 * Stops at max_records, before exceeding max_bytes of buf (at least one record if buflen
 * allows), or at the end. Returns the number of records; -ENOBUFS if the first record does
 * not fit in buf (*needed set). Every record's CRC is checked (-EBADMSG). */
int64_t walfs_read(walfs_t *wal, uint32_t stream_no, uint64_t start_gid, uint32_t max_records,
                   uint64_t max_bytes, uint8_t *buf, uint64_t buflen, walfs_rec_t *recs,
                   uint64_t *needed);
/* Same, addressed by record offset. */
int64_t walfs_read_offset(walfs_t *wal, uint32_t stream_no, uint64_t offset, uint32_t max_records,
                          uint64_t max_bytes, uint8_t *buf, uint64_t buflen, walfs_rec_t *recs,
                          uint64_t *needed);
/* The byte view: values each followed by '\n'. Returns bytes copied (short only at end);
 * -EBADMSG, with *bad_offset set to the first corrupt record's offset, when a record whose
 * view bytes lie in [pos, pos+len) fails its checks (nothing else is returned then). */
int64_t walfs_read_bytes(walfs_t *wal, uint32_t stream_no, uint64_t pos, uint8_t *buf, uint64_t len,
                         uint64_t *bad_offset);
/* A hint for callers that must not wait on the disk: 1 if the segment pages that hold
 * the records of view bytes [pos, pos+len) are in the page cache (checked with mincore
 * over the first run they lie in), 0 if a read would fault some in from the disk. */
int walfs_bytes_resident(walfs_t *wal, uint32_t stream_no, uint64_t pos, uint64_t len);
/* CRC-32C (Castagnoli) of buf, continuing crc (0 to start): the core's own, for tests. */
uint32_t walfs_crc32c(uint32_t crc, const uint8_t *buf, uint64_t len);
/* Kafka wire: encodes n records as walfs_read_offset returned them (bodies in buf,
 * descriptors in recs, contiguous offsets) as one uncompressed Kafka record batch (magic
 * v2), into a buffer it allocates: *out (release it with walfs_free), the returned length
 * long. Key, headers and producer timestamp come from each record's meta section
 * (walfs/records.py, v1); the append time stands in for a missing producer timestamp.
 * -EBADMSG when a meta section does not parse; -ENOBUFS past Kafka's 2 GiB batch;
 * -ENOMEM. Layout at the top of kafka_batch.c. */
int64_t walfs_kafka_batch(const uint8_t *buf, const walfs_rec_t *recs, uint32_t n, uint8_t **out);
/* As walfs_kafka_batch, for a writer (the Spark sink through a daemon): n records whose
 * bodies (meta || value) lie back to back in the concatenation of n_pieces buffers, as
 * walfs_append_pieces takes them (a body that spans pieces is copied, joined; the others
 * are encoded from the pieces), with offsets 0..n-1 and timestamp_ms standing in for a
 * missing producer timestamp, as walfs_kafka_batch allocates and returns it. -EINVAL
 * unless the pieces hold exactly the bodies' bytes; otherwise as walfs_kafka_batch. */
int64_t walfs_kafka_batch_pieces(uint32_t n, uint32_t n_pieces, const uint8_t *const *pieces,
                                 const uint64_t *piece_lens, const uint32_t *meta_lens, const uint32_t *value_lens,
                                 int64_t timestamp_ms, uint8_t **out);
/* Releases what a walfs_* call allocated for its caller (the Kafka batch encoders). */
void walfs_free(void *p);
/* Kafka wire, a fetch in one pass: the records from `offset` on (at least one when any
 * exists, then up to max_records and max_bytes of stored bodies, and as many as out
 * holds) as one Kafka record batch (the layout walfs_kafka_batch writes), encoded straight
 * from the mapped segment, each record's CRC checked before its bytes are used. Returns
 * the batch's length (0 at the end); -ERANGE outside low..next; -ENOBUFS with *needed
 * when the first record does not fit in out; -EBADMSG with *needed = its offset when the
 * first record is damaged (a later damaged one ends the batch before it); -EINVAL with
 * *needed = its offset when the first record's meta section does not parse. */
int64_t walfs_read_kafka_batch(walfs_t *wal, uint32_t stream_no, uint64_t offset, uint32_t max_records,
                               uint64_t max_bytes, uint8_t *out, uint64_t outlen, uint64_t *needed);
/* Kafka wire, the other way: the records section of one (decompressed) v2 batch as walfs
 * records: out receives their bodies (meta || value, as walfs/records.py writes them) back
 * to back, meta_lens/value_lens one entry per record (count of them). base_ts -1 means the
 * producer sent no timestamps. Returns the bytes of out used; -ENOBUFS with *needed when
 * out is too small (nothing is valid then); -EBADMSG for records that do not parse. */
int64_t walfs_kafka_records(const uint8_t *body, uint64_t len, uint32_t count, int64_t base_ts, uint8_t *out,
                            uint64_t outlen, uint32_t *meta_lens, uint32_t *value_lens, uint64_t *needed);
/* View byte position where record `offset` starts (next_byte for next_offset). */
int walfs_byte_position(walfs_t *wal, uint32_t stream_no, uint64_t offset, uint64_t *pos);
/* Number of records that end (newline included) at or before view position pos, i.e. the
 * offset of the record that holds byte pos (next_offset at or past the end). */
int walfs_offset_at_byte(walfs_t *wal, uint32_t stream_no, uint64_t pos, uint64_t *offset);
/* First offset with timestamp >= ts (next_offset if none). */
int walfs_offset_for_time(walfs_t *wal, uint32_t stream_no, int64_t ts, uint64_t *offset);

/* Durable low watermark; blocks wholly below it become reclaimable once sealed. */
int walfs_trim(walfs_t *wal, uint32_t stream_no, uint64_t low_offset);
/* Deletes a stream: it takes no more appends (-ENOENT), its name is free (walfs_stream_open
 * makes a new stream, from offset 0), and its records go like trimmed ones (reclamation
 * frees their segment files). Durable when it returns (a TRIM to the end and a DELETE
 * entry in the catalog, after a sync). Readers of the old stream get -ERANGE. */
int walfs_stream_delete(walfs_t *wal, uint32_t stream_no);
/* Deletes reclaimable segment files; returns how many. */
int walfs_reclaim(walfs_t *wal);

/* What a stream costs on disk (csrc/budget.c): the number of segment files it is charged
 * for (whole files), and in first_offsets (up to max of them, oldest first) the first
 * offset of the stream's runs in each. */
int walfs_stream_files(walfs_t *wal, uint32_t stream_no, uint64_t *first_offsets, uint32_t max);
/* Caps the files a stream is charged for (0: no cap): an append that needs a run in one
 * more file fails with -EDQUOT and appends nothing. */
int walfs_stream_set_file_cap(walfs_t *wal, uint32_t stream_no, uint32_t cap);
/* The size of every segment file: the WAL's geometry as it was created. */
uint64_t walfs_segment_size(walfs_t *wal);

/* Full check of every stored record (fsck). Returns the number of bad records found;
 * details go to the callback if given. */
typedef void (*walfs_fsck_cb)(void *ctx, uint32_t stream_no, uint64_t offset, const char *what);
int64_t walfs_verify(walfs_t *wal, walfs_fsck_cb cb, void *ctx);
/* The same, telling `progress` after each stream and every 65536 records: streams done of
 * all, records checked and their bytes (headers included) so far. Both callbacks get ctx.
 * A non-zero return from `progress` stops the check: -ECANCELED. */
typedef int (*walfs_verify_progress_cb)(void *ctx, uint32_t streams_done, uint32_t streams, uint64_t records,
                                         uint64_t bytes);
int64_t walfs_verify_progress(walfs_t *wal, walfs_fsck_cb cb, walfs_verify_progress_cb progress, void *ctx);

/* ---- Salvage (csrc/salvage.c): raw scanners for `walfs fsck --repair`, independent of the
 * catalog and of recovery. They work on bytes the caller read (or mapped read-only) from a
 * damaged data directory, bounds-check everything and never write to it. */
typedef struct walfs_salvage_rec {
    uint64_t file_pos;      /* the record's header in the segment file; body at file_pos + 36 */
    uint64_t offset;        /* first_offset of its run + its index in the run */
    uint64_t view_pos;      /* byte-view position (run first_byte + slot view delta, or walked) */
    uint64_t gid;
    int64_t timestamp_ms;
    uint32_t stream_no;
    uint32_t meta_len;
    uint32_t value_len;
    uint32_t batch_left;
} walfs_salvage_rec_t;

typedef struct walfs_salvage_entry {
    uint32_t type;          /* 1 DEFINE, 2 TRIM, 3 FLOOR, 4 OPEN (docs/format.md) */
    uint32_t stream_no;
    uint32_t partition;
    uint16_t name_len;
    uint64_t org_id;
    uint8_t topic_hash[16];
    char name[256];
    uint64_t a;             /* TRIM low_offset, FLOOR next_offset, OPEN epoch */
    uint64_t b;             /* FLOOR next_byte */
} walfs_salvage_entry_t;

/* The WAL's uuid and geometry from a catalog header (64 bytes) or a segment header (its
 * crc is seeded with the uuid it carries). 0, or -EUCLEAN / -EBADMSG when neither verifies. */
int walfs_salvage_identity(const uint8_t *buf, uint64_t len, uint64_t *uuid, uint32_t *block_size,
                           uint64_t *segment_size);
/* Every catalog entry whose crc verifies, in file order; a bad entry is skipped byte by byte
 * up to the next one that verifies (*skipped counts those bytes). Returns entries written
 * (at most cap) or -ENOBUFS. */
int64_t walfs_salvage_catalog(const uint8_t *buf, uint64_t len, uint64_t uuid, walfs_salvage_entry_t *out,
                              uint64_t cap, uint64_t *skipped);
/* Scans a segment file's bytes from block *block (0-based) on: every run whose open header
 * verifies, and in it every record whose crc verifies, found by its index slot or by walking
 * from the previous record. Stops before a run whose records might not fit in cap; *block is
 * where to resume (UINT64_MAX at the end). Returns records written; -ENOBUFS with *needed
 * when not even one run fits. *bad_runs counts blocks whose open header was present but bad. */
int64_t walfs_salvage_segment(const uint8_t *seg, uint64_t len, uint64_t uuid, uint64_t seg_id,
                              uint32_t block_size, uint64_t *block, walfs_salvage_rec_t *out, uint64_t cap,
                              uint64_t *needed, uint64_t *bad_runs);
/* On a new, writable WAL: makes an empty stream start at next_offset (byte view at
 * next_byte) with a FLOOR and a TRIM catalog entry, so that salvaged records keep their
 * offsets. -EINVAL if the stream already holds records. */
int walfs_salvage_start_at(walfs_t *wal, uint32_t stream_no, uint64_t next_offset, uint64_t next_byte);

/* Test mode only. */
/* RECLAIM fails walfs_reclaim where it would write its SEGMENT_GONE entries (nothing is
 * deleted, as when that catalog write fails). */
/* WRITEBACK fails the writeback thread's sync_file_range as if it returned -err
 * (csrc/writeback.c: the next sync round fails with it). */
enum walfs_fault_op { WALFS_FAULT_WRITE = 1, WALFS_FAULT_SYNC = 2, WALFS_FAULT_ALLOC = 3, WALFS_FAULT_RECLAIM = 4, WALFS_FAULT_WRITEBACK = 5 };
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

/* ---- core messages (issue 9) ----
 * Warnings (a torn tail cut, ...) and damage reports of the core. Without a callback they
 * go to stderr. The callback may be called from any thread, the core's own sync thread
 * included, and with the core's locks held: it must not call back into walfs. Levels are
 * Python logging's. Process-wide, like the logging it feeds. */
enum walfs_log_level { WALFS_LOG_INFO = 20, WALFS_LOG_WARNING = 30, WALFS_LOG_ERROR = 40 };
typedef void (*walfs_log_fn)(int level, const char *dir, const char *message);
void walfs_set_log(walfs_log_fn fn);

#endif
