/*
 * walfs_salvage.h: salvage (csrc/salvage.c) for `walfs fsck --repair` (walfs/local/salvage.py
 * binds it). Errors as walfs.h says.
 */
#ifndef WALFS_SALVAGE_H
#define WALFS_SALVAGE_H

#include "walfs.h"

/* Raw scanners, independent of the catalog and of recovery. They work on bytes the caller
 * read (or mapped read-only) from a damaged data directory, bounds-check everything and
 * never write to it. */
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

#endif
