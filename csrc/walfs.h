/*
 * walfs.h: the storage ABI of the C core: open and close, streams, append, read, sync,
 * trim and reclaim, budgets, stats, verify and the core's messages. The other public
 * headers add to it: walfs_kafka.h (Kafka record batches, csrc/kafka_batch.c),
 * walfs_salvage.h (raw scanners for fsck --repair, csrc/salvage.c) and walfs_debug.h (test
 * hooks). The four are the one boundary between the C core and Python: walfs/_build.py
 * feeds them to cffi as they are (walfs._core).
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
    uint64_t verified_records;   /* records checked by CRC at open (above a clean frontier, or all of a run without one) */
    uint64_t cut_records;        /* torn or incomplete-batch records removed from tails */
    uint64_t cut_bytes;
    uint64_t freed_blocks;
    uint64_t syncs;              /* since open: fsync rounds (one round syncs every dirty file) */
    uint64_t catalog_version;    /* of streams.cat as found at open (a writer's open upgrades 2 to 3;
                                    1 waits for walfs_catalog_upgrade or the clean close) */
    uint64_t healed;             /* damaged metadata copies this open rewrote from a good one (a
                                    catalog copy, a segment header); a read-only open counts none */
    uint64_t metadata_damaged;   /* damaged metadata copies this open found and served from the
                                    good one (a writer's open: the same as healed) */
    uint64_t quarantined;        /* damaged records kept, not cut: below a durable frontier or in a
                                    sealed run; each read of one fails (-EBADMSG), the rest are served */
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
/* A writer: rewrites a version 1 or 2 catalog as version 3 with its mirror (a writer's open
 * does it for version 2 itself; version 1 waits for this call, made once the Python
 * layer's own files are upgraded, or for the clean close). 0 on a read-only WAL. */
int walfs_catalog_upgrade(walfs_t *wal);
int walfs_disk_stats(walfs_t *wal, walfs_disk_stats_t *out);
/* 0 while healthy; the negative errno of the fsync that failed otherwise. */
int walfs_failed(walfs_t *wal);

/* Streams: (org_id, partition, topic_hash) identifies one; name is kept for listing. */
int walfs_stream_open(walfs_t *wal, uint64_t org_id, uint32_t partition, const uint8_t *topic_hash,
                      const char *name, uint32_t name_len, int create, uint32_t *stream_no);
int walfs_stream_count(walfs_t *wal);
/* Who streams first .. first+max-1 are, without their marks (which touch their runs): what
 * an open lists once for every stream. Returns how many it filled (fewer past the last). */
typedef struct walfs_stream_id {
    uint32_t stream_no;
    uint32_t partition;
    uint64_t org_id;
    uint8_t topic_hash[16];
    uint32_t deleted;
    uint16_t name_len;
    char name[256];
} walfs_stream_id_t;
int walfs_stream_ids(walfs_t *wal, uint32_t first, walfs_stream_id_t *out, uint32_t max);
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
/* CRC-32C (Castagnoli) of buf, continuing crc (0 to start): the core's own (csrc/crc32c.c,
 * the format's checksum), also the Kafka batch CRC of walfs/wire/batch_codec.py. */
uint32_t walfs_crc32c(uint32_t crc, const uint8_t *buf, uint64_t len);
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

/* ---- core messages (issue 9) ----
 * Warnings (a torn tail cut, ...) and damage reports of the core. Without a callback they
 * go to stderr. The callback may be called from any thread, the core's own sync thread
 * included, and with the core's locks held: it must not call back into walfs. Levels are
 * Python logging's. Process-wide, like the logging it feeds. */
enum walfs_log_level { WALFS_LOG_INFO = 20, WALFS_LOG_WARNING = 30, WALFS_LOG_ERROR = 40 };
typedef void (*walfs_log_fn)(int level, const char *dir, const char *message);
void walfs_set_log(walfs_log_fn fn);

#endif
