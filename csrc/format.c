/*
 * format.c: the walfs on-disk format. Every byte walfs lays down on disk is encoded and
 * decoded here; this comment is the contract (docs/format.md repeats it with examples).
 * All integers are little-endian. CRCs are CRC32C (Castagnoli), seeded with
 * seed = (uint32_t)(uuid ^ (uuid >> 32)) where uuid is the WAL's random 64-bit id, so that
 * bytes left over from another WAL never validate here.
 *
 * FORMAT VERSION 3: catalog version 3 (two copies); segment headers and block runs' run headers version 1
 * (unchanged); small runs' run headers and carve headers version 2 (issue 35: "Small runs")
 *
 * Data directory
 *   LOCK                     flock()ed by the one process that writes the WAL
 *   streams.cat              the catalog: stream definitions, trims, floors, segment files
 *   streams.cat.mirror       its second copy (catalog version 3), written in the same durable step
 *   seg-<16 hex digits>.wal  segment files, ids increasing from 1
 *   index.snap               topic index snapshot (releases before 0.2; deleted at open)
 *   cursors/                 consumer cursors, two slots each (walfs/local/cursors.py)
 *   cursors.manifest(.mirror)  the list of cursor files, kept twice (walfs/local/cursors.py)
 *   topics.conf(.mirror)     per-topic settings, kept twice (walfs/local/settings_file.py)
 *
 * Catalog (streams.cat): a 64-byte header then entries, appended and fdatasync()ed before
 * the call that wrote them returns.
 *   header: 0 magic "WALFSCAT" | 8 u32 version (3; 1 and 2 are read, see below) | 12 u32 block_size
 *           | 16 u64 uuid | 24 u64 created_ms | 32 u64 segment_size
 *           | 40 u64 generation (v3: raised by every compaction) | 48 u32 copy (v3: 0 streams.cat,
 *           1 streams.cat.mirror) | 52..60 zero | 60 u32 crc (seed 0) of bytes 0..60
 *   The sizes are the WAL's for life: options given at a later open are ignored.
 *   entry:  0 u32 crc of bytes 4..len | 4 u16 type | 6 u16 len (whole entry) | 8 payload
 *     v3: the crc is seeded with crc32c(seed, u32 copy | u64 byte offset of the entry in its
 *     file | u64 generation) (fmt_cat_loc_seed): an entry at another offset, in the other
 *     copy or of another generation fails.
 *     type 1 DEFINE: u32 stream_no | u32 partition | u64 org_id | u8[16] topic_hash
 *                    | u16 name_len | name bytes
 *     type 2 TRIM:   u32 stream_no | u32 0 | u64 low_offset
 *     type 3 FLOOR:  u32 stream_no | u32 0 | u64 next_offset | u64 next_byte | u64 next_gid
 *     type 4 OPEN:   u64 epoch (one per writer open; gids are epoch << 40 | sequence)
 *     type 5 DELETE: u32 stream_no | u32 0 (the stream was deleted; written after a TRIM to its end)
 *     type 6 SEGMENT:      u64 segment_id (version 2) | u64 created_ms (version 3: its header's)
 *     type 7 SEGMENT_GONE: u64 segment_id (version 2)
 *   What version 2 proves (catalog.c, recovery.c, segment.c, reclaim.c):
 *     - SEGMENT is appended once the new file, its header and the directory are durable,
 *       before any run is put in it; SEGMENT_GONE before reclamation unlinks the file. So a
 *       file the catalog does not list is damage (a catalog cut short), except the newest
 *       file when no run header in it is valid (a creation cut short: removed by a writer
 *       open); a listed file that is missing without SEGMENT_GONE is damage; a listed-GONE
 *       file that still exists is a reclamation cut short (a writer open deletes it). ids
 *       in SEGMENT entries only grow.
 *     - FLOOR entries double as durable-end marks: written with a stream's durable end
 *       (offset, view byte; never beyond what a completed sync made durable) when a segment
 *       is created, at reclamation, after a sync round at most once a second, and at close.
 *       A stream whose runs end below its highest FLOOR, with the FLOOR above its low
 *       watermark, lost durable records: damage, reported before anything is cut.
 *     - A run naming a stream_no the catalog does not define is damage (a DEFINE is synced
 *       before its stream can allocate a run, and stream numbers are never reused).
 *   Version 1 catalogs (no SEGMENT entries) are read without these checks.
 *   Version 3 (two copies; catalog.c): every append writes the same entries at the same
 *   offset of both files and fdatasyncs both before it returns. At open both copies are
 *   walked in step: an entry valid in both must be equal; valid in one only, it is taken
 *   from it (the other is damaged there or ends there: a crash between the two writes);
 *   bad in both, it ends the catalog only as a torn tail of both, else -EUCLEAN naming both
 *   files and the byte. One header bad: the other's. Both bad: -EUCLEAN naming both. Valid
 *   headers of different generations (a compaction cut between its renames): the newer
 *   copy whole (the older if the newer fails). A writer's open that took anything from one
 *   copy only rewrites both (compaction, generation + 1) before appending, and counts it
 *   in the report's `healed`; a read-only open serves from the good copy.
 *   Upgrade: a writer's open rewrites a version 2 catalog as version 3 (compaction, both
 *   copies); version 1 waits for walfs_catalog_upgrade (the Python layer, once its cursor
 *   manifest exists) or the clean close. Releases before refuse version 3 ("unknown
 *   format version"); a mirror beside a version 1/2 catalog is ignored.
 *   Stream numbers are dense from 0 in DEFINE order. A crash leaves at most one incomplete
 *   entry, at the end (one pwrite + fdatasync per entry; a failed append is truncated
 *   away). So a bad entry (crc, type or length wrong) is a torn tail, and is cut (by a
 *   writer, once recovery found no damage), only if at most CAT_MAX_ENTRY (297) bytes
 *   remain from it AND no valid entry starts at any later byte; any other bad or
 *   out-of-order entry is damage: the open fails with -EUCLEAN naming the byte offset
 *   (catalog.c), and the file is never truncated or rewritten.
 *   Compaction (catalog.c): once at least 1024 entries and four times the live ones are
 *   stored, the writer rewrites the file as the same header (v3: generation + 1, each copy
 *   its copy number and its own entry binding), then (version 2) a SEGMENT
 *   entry per segment file, then per stream its DEFINE, its TRIM (if its low watermark is
 *   above 0), its highest FLOOR (if any) and its DELETE (if deleted), then one OPEN with
 *   the current epoch; written to streams.cat.tmp (v3: and streams.cat.mirror.tmp), fsynced,
 *   renamed over streams.cat (then the mirror), directory fsynced. A reader holding the old file re-reads the new one
 *   when its inode changes; a leftover streams.cat.tmp means nothing.
 *
 * Segment file: segment_size bytes (sparse: its header area fallocate()d at creation, its
 * blocks as runs take them; file and directory fsync()ed before use), a 4096-byte header
 * area, then n_blocks blocks of block_size bytes.
 *   header: 0 magic "WALFSSEG" | 8 u32 version=1 | 12 u32 block_size | 16 u64 segment_size
 *           | 24 u64 segment_id | 32 u64 uuid | 40 u64 created_ms | 48 u32 n_blocks
 *           | 52..60 zero | 60 u32 crc of bytes 0..60
 *   At open: header verified, sizes equal to the catalog's, n_blocks equal to what the
 *   size holds, file at least segment_size bytes, before it is mapped; otherwise -EUCLEAN
 *   naming the file (-EIO if unreadable). A segment is never deleted for a bad header; only
 *   the NEWEST file that provably never held data (header area all zero, no valid open
 *   header at any block) is removed, as a creation cut short by a crash (segment.c).
 *   Rebuild (catalog v3): a header that fails its checks, of a file a v3 catalog lists
 *   (SEGMENT with created_ms, no SEGMENT_GONE) and exactly segment_size bytes long, is
 *   rebuilt from the catalog (these very fields: creation syncs the header before its
 *   SEGMENT entry); a writer writes it back and fdatasyncs it (healed), a read-only open
 *   uses it in memory.
 *
 * Block run: one or more consecutive blocks owned by one stream (a run is longer than one
 * block only when a record needs it). Within a run, relative to its first byte:
 *   0     open header (128 bytes), written when the run is allocated
 *   256   frontier header (128 bytes, optional), rewritten in place after sync rounds
 *   512   seal header (128 bytes), written once the run is full AND its data is durable
 *   1024  records, packed one after another (no padding)
 *   end   index slots, 12 bytes each, slot i at run_size - 12*(i+1) (growing downwards)
 *   open header: 0 magic "WALFSBLK" | 8 u16 version=1 | 10 u16 kind=1 | 12 u32 n_blocks
 *                | 16 u64 uuid | 24 u64 segment_id | 32 u32 block_index | 36 u32 stream_no
 *                | 40 u64 first_offset | 48 u64 first_byte | 56 u64 first_gid
 *                | 64..124 zero | 124 u32 crc of bytes 0..124
 *   seal header: as the open header up to byte 40 (kind=2), then 40 u64 first_offset
 *                | 48 u64 count | 56 u64 last_gid | 64 u64 data_end | 72 u64 byte_len
 *                | 80 i64 first_ts | 88 i64 last_ts | 96..124 zero | 124 u32 crc
 *   frontier header: as the open header up to byte 40 (kind=3), then 40 u64 first_offset
 *                | 48 u64 first_gid | 56 u64 count | 64 u64 data_end | 72 u32 flags
 *                | 76..124 zero (a small run's fields from 96, below) | 124 u32 crc.
 *                `count` records of the run (ending at data_end) were made durable by a
 *                completed sync (frontier.c). flags bit 0 CLEAN: no record below count is
 *                known damaged (written whenever the run holds no quarantined record): an
 *                open trusts them as a seal's. Valid only if every identity field,
 *                first_gid included, matches the open header. Optional: WALs written
 *                before it have none (format version unchanged, no migration; older code
 *                ignores bytes 128..512, and the flags: it verifies such runs as before).
 *   record: 0 u32 crc of bytes 4..36 and of the body | 4 u32 value_len | 8 u64 gid
 *           | 16 i64 timestamp_ms (append time) | 24 u32 meta_len | 28 u32 batch_left
 *           | 32 u32 stream_no
 *           | 36 body = meta (meta_len bytes: key and headers, encoded by the Python layer)
 *             followed by the value (value_len bytes)
 *     batch_left counts the records of the same append call that follow this one; the
 *     last record of every append has batch_left = 0.
 *   index slot i: 0 u32 pos (record's start, relative to the run) | 4 u32 gid - first_gid
 *                 | 8 u32 view position - first_byte
 *   The byte view of a stream is, in offset order, each record's value followed by '\n';
 *   first_byte is the view position of the run's first record.
 *
 * Small runs (run header version 2; allocator.c): a stream's first runs are smaller than a
 * block, in size classes 4096 * 4^k bytes while a block holds at least 4 of them (with
 * 10 MiB blocks: 4, 16, 64, 256 KiB and 1 MiB); each next run of a stream is one class
 * larger when appends filled the last one, else the class that holds what the last one
 * holds (or the class that holds its first record), then block runs as above. Small runs
 * of one class live in a CARVED block, cut into slots of the class (slot k at block byte
 * k * class); a small run has exactly the layout of a block run above (headers at 0, 256,
 * 512, records from 1024, slots from its end), relative to its slot.
 *   carve header, at block byte 128 (between slot 0's open and frontier headers):
 *                0 magic "WALFSBLK" | 8 u16 version=2 | 10 u16 kind=4 | 12 u32 0
 *                | 16 u64 uuid | 24 u64 segment_id | 32 u32 block_index | 36..96 zero
 *                | 96 u64 class size | 104 u64 carve id | 112..124 zero
 *                | 124 u32 crc of bytes 0..124
 *                The carve id is unique to this carve of any block, ever: the writer
 *                open's epoch << 32 | a count of that open's carves. Written (not
 *                synced) when the block is carved, before any run in it, with slot 0's run
 *                (the first a carve hands out) in the same sector; a sync that makes any
 *                run of the block durable makes the carve header durable too
 *                (allocator.c carve_block). A block once carved stays carved until its
 *                segment file is reclaimed, unless its carve header never reached the disk.
 *   small run headers (open, frontier, seal): as a block run's with version=2,
 *                n_blocks=0, block_index = its block, and 96 u32 run_size (the class)
 *                | 100 u32 slot | 104 u64 carve id (its block's) | 112 u64 src_seg (a
 *                cleaner's copy: the segment its original lies in; 0 otherwise)
 *                | 120 u32 0. Version 1
 *                headers are block runs' (n_blocks >= 1, bytes 96..124 zero); a version 1
 *                header with n_blocks 0, or a version 2 one with n_blocks != 0, is invalid.
 *   Validity (recovery.c scan_blocks), per block not a hole of the sparse file: a valid
 *   carve header of a class of this block size makes it carved: each slot k is probed, and
 *   is a run iff its open header is valid AND names this segment, block, slot k, the
 *   class and the carve id. Else a valid version 1 open header at byte 0 is a block run as before. Else a
 *   valid version 2 open header at byte 0 naming slot 0 and a class proves the block
 *   carved with its carve id (its carve header, in the same sector, was damaged: a writer
 *   rewrites it, logged). Else the block is free. A probe never takes record bytes for a
 *   header: a header is accepted only with its crc under the WAL's seed AND every location
 *   field equal to the place it was read (segment, block, slot, class, carve), which bytes
 *   written anywhere else never carry. A run header of a later slot may reach the disk
 *   without its carve header (a run no sync promised): its block is then free, and if it
 *   is carved again its new carve id rejects the stale header. Within one carve, a stale
 *   header of an earlier run in the same slot names the same place, and is handled as
 *   for block runs: recovery
 *   zeroes the open and seal headers of every run it cuts, and a stale frontier has
 *   another first_gid (gids grow across epochs).
 *   A small run's seal and frontier headers are its own only if run_size, slot, carve id
 *   and src_seg match its open header too.
 *   Copies (reclaim.c, the cleaner): a run whose src_seg is not 0 is kept only if that
 *   segment is not in use (absent, or SEGMENT_GONE in the catalog: the cleaner writes that
 *   entry only once its copies are durable). While the source segment is in use the
 *   original is in force and the copy is dropped (a writer zeroes its open and seal
 *   headers; logged).
 *   Space: a segment file is created at its full length but sparse (its 4 KiB header area
 *   allocated); a run's blocks, or a block being carved, are fallocate()d before anything is
 *   written there, so a full disk is ENOSPC when a run is allocated, before an append
 *   writes a byte, never a torn record or a SIGBUS. Blocks never reserved are holes:
 *   recovery skips them (SEEK_DATA) without reading them. Slots of a carved block never
 *   written are not read either (recovery.c scan_carved_written: FIEMAP's unwritten
 *   extents when no page of the block is dirty, else SEEK_DATA's holes).
 *
 * Validity rule (recovery):
 *   - A run exists when its open header is valid (crc, uuid, segment id, block index; a
 *     small run's also slot and class: see Small runs).
 *   - A run with a valid seal header holds exactly `count` records: seals are written only
 *     after an fsync made the whole run durable, so they are trusted without reading data
 *     (their figures are still bounds-checked against the run, a misfit is -EUCLEAN; when
 *     the stream ends in it, the slot of the last record is read for its batch_left: a
 *     misfit there quarantines it).
 *   - A run without a seal whose frontier is CLEAN holds at least the frontier's `count`
 *     records, trusted like a seal's, once its first record (at byte 1024, slot 0 naming it,
 *     first_gid) and its record count-1 (its slot and header agree, inside the run, its
 *     crc, ending at data_end) prove themselves; the records after it are verified as
 *     below. If either does not prove itself, the run is verified as below, whole.
 *   - A run without a seal is verified record by record from byte 1024: a record is valid
 *     when its crc matches, it names the run's stream, its gid is the run's first_gid (first record) or above the
 *     previous one, it ends before the slot area it needs, and its index slot matches it.
 *     The first invalid record ends the run if it is at or above the run's frontier count
 *     (a torn tail); below it, it is quarantined: kept in the count, refused to every read
 *     (-EBADMSG), reported at every open; the next record is found through its index slot
 *     (slot and record must agree), or at the frontier's data_end after the last durable
 *     one (recovery.c; docs/format.md spells out what proves what). No rule below cuts
 *     records under a frontier (-EUCLEAN). A run holding quarantined records is never
 *     sealed: its frontier is rewritten to its whole count instead. Later runs of the stream that do not
 *     continue its offsets are cut. Bytes beyond a run's end are never zeroed: a new
 *     writer epoch gives every later record a higher gid, so stale records, whose gids
 *     are lower, can never be taken for a continuation.
 *   - If a stream then ends in a record with batch_left > 0, its incomplete last append is
 *     cut back to the last record with batch_left = 0.
 *   - Runs cut entirely lose their open and seal headers (zeroed), a sealed run cut back
 *     loses its seal, and all of it is fsync()ed before the WAL accepts appends. A record
 *     and its slot are both written before the append's sync, so every record reported
 *     durable passes these checks and no cut can remove it.
 *
 * Cost per record, all included: 36-byte header + 12-byte index slot = 48 bytes, plus
 * 1 KiB per run and 4 KiB per segment. A stream's least cost is one 4 KiB small run.
 */
#include "internal.h"

#include <string.h>

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static const char CAT_MAGIC[8] = {'W', 'A', 'L', 'F', 'S', 'C', 'A', 'T'};
static const char SEG_MAGIC[8] = {'W', 'A', 'L', 'F', 'S', 'S', 'E', 'G'};
static const char BLK_MAGIC[8] = {'W', 'A', 'L', 'F', 'S', 'B', 'L', 'K'};

uint32_t crc_seed_for(uint64_t uuid) { return (uint32_t)(uuid ^ (uuid >> 32)); }

/* ---- catalog ---- */

void fmt_cat_header(uint8_t *out, uint64_t uuid, uint64_t created_ms, uint64_t segment_size,
                    uint32_t block_size, uint64_t generation, uint32_t copy)
{
    memset(out, 0, CAT_HDR_SIZE);
    memcpy(out, CAT_MAGIC, 8);
    put32(out + 8, CAT_VERSION);
    put32(out + 12, block_size);
    put64(out + 16, uuid);
    put64(out + 24, created_ms);
    put64(out + 32, segment_size);
    put64(out + 40, generation);
    put32(out + 48, copy);
    /* The header's crc cannot be seeded with the uuid it carries: use seed 0. */
    put32(out + 60, crc32c(0, out, 60));
}

int fmt_cat_header_parse(const uint8_t *in, uint64_t *uuid, uint64_t *segment_size,
                         uint32_t *block_size)
{
    if (memcmp(in, CAT_MAGIC, 8) != 0) return -EUCLEAN;
    if (get32(in + 60) != crc32c(0, in, 60)) return -EBADMSG;
    if (get32(in + 8) < 1 || get32(in + 8) > CAT_VERSION) return -EPROTONOSUPPORT;
    *uuid = get64(in + 16);
    *block_size = get32(in + 12);
    *segment_size = get64(in + 32);
    return 0;
}

/* The version of a header that fmt_cat_header_parse accepted. */
uint32_t fmt_cat_header_version(const uint8_t *in) { return get32(in + 8); }

/* Version 3: the compaction generation and the copy number (0 streams.cat, 1 its mirror). */
uint64_t fmt_cat_header_generation(const uint8_t *in) { return get32(in + 8) >= 3 ? get64(in + 40) : 0; }
uint32_t fmt_cat_header_copy(const uint8_t *in) { return get32(in + 8) >= 3 ? get32(in + 48) : 0; }

/* A header made version 3 (an upgrade, a compaction, a heal): generation and copy set,
 * crc redone. */
void fmt_cat_header_set(uint8_t *hdr, uint64_t generation, uint32_t copy)
{
    put32(hdr + 8, CAT_VERSION);
    memset(hdr + 40, 0, 20);
    put64(hdr + 40, generation);
    put32(hdr + 48, copy);
    put32(hdr + 60, crc32c(0, hdr, 60));
}

/* Version 3 binds each entry to its place: its crc is seeded with the WAL's seed run over
 * (u32 copy, u64 byte offset of the entry in its file, u64 generation of the file), so an
 * entry written at another offset, into the other copy or left from another generation
 * (a misdirected write, a compaction cut between its renames) fails its check. */
uint32_t fmt_cat_loc_seed(uint32_t seed, uint32_t copy, uint64_t off, uint64_t generation)
{
    uint8_t loc[20];
    put32(loc, copy);
    put64(loc + 4, off);
    put64(loc + 12, generation);
    return crc32c(seed, loc, sizeof(loc));
}

/* Re-seals an entry built with the plain seed (fmt_cat_*) for its place in a version 3
 * copy. */
void fmt_cat_bind(uint8_t *entry, uint32_t seed, uint32_t copy, uint64_t off, uint64_t generation)
{
    put32(entry, crc32c(fmt_cat_loc_seed(seed, copy, off, generation), entry + 4, (size_t)get16(entry + 6) - 4));
}

/* The length field of an entry (fmt_cat_* built it: no check). */
size_t fmt_cat_entry_len(const uint8_t *entry) { return get16(entry + 6); }

static size_t cat_entry_finish(uint8_t *out, uint32_t seed, uint16_t type, size_t len)
{
    put16(out + 4, type);
    put16(out + 6, (uint16_t)len);
    put32(out, crc32c(seed, out + 4, len - 4));
    return len;
}

size_t fmt_cat_define(uint8_t *out, uint32_t seed, const stream_t *s)
{
    put32(out + 8, s->no);
    put32(out + 12, s->partition);
    put64(out + 16, s->org_id);
    memcpy(out + 24, s->hash, 16);
    put16(out + 40, s->name_len);
    memcpy(out + 42, s->name, s->name_len);
    return cat_entry_finish(out, seed, CAT_DEFINE, 42 + (size_t)s->name_len);
}

size_t fmt_cat_trim(uint8_t *out, uint32_t seed, uint32_t stream_no, uint64_t low_offset)
{
    put32(out + 8, stream_no);
    put32(out + 12, 0);
    put64(out + 16, low_offset);
    return cat_entry_finish(out, seed, CAT_TRIM, 24);
}

size_t fmt_cat_floor(uint8_t *out, uint32_t seed, uint32_t stream_no, uint64_t next_offset,
                     uint64_t next_byte, uint64_t next_gid)
{
    put32(out + 8, stream_no);
    put32(out + 12, 0);
    put64(out + 16, next_offset);
    put64(out + 24, next_byte);
    put64(out + 32, next_gid);
    return cat_entry_finish(out, seed, CAT_FLOOR, 40);
}

size_t fmt_cat_delete(uint8_t *out, uint32_t seed, uint32_t stream_no)
{
    put32(out + 8, stream_no);
    put32(out + 12, 0);
    return cat_entry_finish(out, seed, CAT_DELETE, 16);
}

size_t fmt_cat_segment(uint8_t *out, uint32_t seed, uint16_t type, uint64_t seg_id, uint64_t created_ms)
{
    put64(out + 8, seg_id);
    if (type != CAT_SEGMENT) return cat_entry_finish(out, seed, type, 16);
    put64(out + 16, created_ms); /* version 3: what the segment header holds beyond the geometry */
    return cat_entry_finish(out, seed, type, 24);
}

size_t fmt_cat_open(uint8_t *out, uint32_t seed, uint64_t epoch)
{
    put64(out + 8, epoch);
    return cat_entry_finish(out, seed, CAT_OPEN, 16);
}

/* Returns the entry's length, or 0 with *why saying what failed (bounds first: nothing
 * past `avail` is read). */
size_t fmt_cat_entry_parse(const uint8_t *in, size_t avail, uint32_t seed, cat_entry_t *e, const char **why)
{
#define BAD(reason)          \
    do {                     \
        *why = (reason);     \
        return 0;            \
    } while (0)
    if (avail < 8) BAD("shorter than an entry header");
    uint16_t type = get16(in + 4), len = get16(in + 6);
    if (len < 8) BAD("length field below 8");
    if (len > avail) BAD("length field runs past the end of the file");
    if (get32(in) != crc32c(seed, in + 4, (size_t)len - 4)) BAD("crc mismatch");
    memset(e, 0, sizeof(*e));
    e->type = type;
    switch (type) {
    case CAT_DEFINE:
        if (len < 42) BAD("DEFINE entry too short");
        e->stream_no = get32(in + 8);
        e->partition = get32(in + 12);
        e->org_id = get64(in + 16);
        memcpy(e->hash, in + 24, 16);
        e->name_len = get16(in + 40);
        if (e->name_len > MAX_NAME || 42u + e->name_len != len) BAD("DEFINE name length does not match");
        memcpy(e->name, in + 42, e->name_len);
        return len;
    case CAT_TRIM:
        if (len != 24) BAD("TRIM entry of the wrong length");
        e->stream_no = get32(in + 8);
        e->a = get64(in + 16);
        return len;
    case CAT_FLOOR:
        if (len != 40) BAD("FLOOR entry of the wrong length");
        e->stream_no = get32(in + 8);
        e->a = get64(in + 16);
        e->b = get64(in + 24);
        e->c = get64(in + 32);
        return len;
    case CAT_DELETE:
        if (len != 16) BAD("DELETE entry of the wrong length");
        e->stream_no = get32(in + 8);
        return len;
    case CAT_OPEN:
        if (len != 16) BAD("OPEN entry of the wrong length");
        e->a = get64(in + 8);
        return len;
    case CAT_SEGMENT:
        if (len != 16 && len != 24) BAD("SEGMENT entry of the wrong length");
        e->a = get64(in + 8);
        e->b = len == 24 ? get64(in + 16) : 0;
        return len;
    case CAT_SEGMENT_GONE:
        if (len != 16) BAD("SEGMENT_GONE entry of the wrong length");
        e->a = get64(in + 8);
        return len;
    default:
        BAD("unknown entry type");
    }
#undef BAD
}

/* ---- segment ---- */

void fmt_seg_header(uint8_t *out, const walfs_t *wal, uint64_t seg_id, uint32_t n_blocks, uint64_t created_ms)
{
    memset(out, 0, SEG_HDR_SIZE);
    memcpy(out, SEG_MAGIC, 8);
    put32(out + 8, SEG_HDR_VERSION);
    put32(out + 12, wal->opt.block_size);
    put64(out + 16, wal->opt.segment_size);
    put64(out + 24, seg_id);
    put64(out + 32, wal->uuid);
    put64(out + 40, created_ms);
    put32(out + 48, n_blocks);
    put32(out + 60, crc32c(wal->crc_seed, out, 60));
}

int fmt_seg_header_parse(const uint8_t *in, const walfs_t *wal, uint64_t seg_id, uint64_t *seg_size,
                         uint32_t *block_size, uint32_t *n_blocks, uint64_t *created_ms)
{
    if (memcmp(in, SEG_MAGIC, 8) != 0) return -EUCLEAN;
    if (get32(in + 60) != crc32c(wal->crc_seed, in, 60)) return -EBADMSG;
    if (get32(in + 8) != SEG_HDR_VERSION) return -EPROTONOSUPPORT;
    if (get64(in + 24) != seg_id || get64(in + 32) != wal->uuid) return -EUCLEAN;
    *block_size = get32(in + 12);
    *seg_size = get64(in + 16);
    *created_ms = get64(in + 40);
    *n_blocks = get32(in + 48);
    return 0;
}

/* ---- block headers ---- */

static void blk_common(uint8_t *out, const walfs_t *wal, const block_t *b, uint16_t kind)
{
    memset(out, 0, BLK_HDR_SIZE);
    memcpy(out, BLK_MAGIC, 8);
    put16(out + 8, b->n_blocks ? FORMAT_VERSION : RUN_VERSION_SMALL);
    put16(out + 10, kind);
    put32(out + 12, b->n_blocks);
    put64(out + 16, wal->uuid);
    put64(out + 24, b->seg->id);
    put32(out + 32, b->index);
    put32(out + 36, b->stream_no);
    put64(out + 40, b->first_offset);
    if (!b->n_blocks) { /* a small run: its size, slot and carve bind it to its place too */
        put32(out + 96, (uint32_t)b->run_size);
        put32(out + 100, b->slot);
        put64(out + 104, b->seg->carves[b->index]->carve_id);
        put64(out + 112, b->src_seg);
    }
}

void fmt_blk_open(uint8_t *out, const walfs_t *wal, const block_t *b)
{
    blk_common(out, wal, b, BLK_KIND_OPEN);
    put64(out + 48, b->first_byte);
    put64(out + 56, b->first_gid);
    put32(out + 124, crc32c(wal->crc_seed, out, 124));
}

void fmt_blk_seal(uint8_t *out, const walfs_t *wal, const block_t *b)
{
    blk_common(out, wal, b, BLK_KIND_SEAL);
    put64(out + 48, b->count);
    put64(out + 56, b->last_gid);
    put64(out + 64, b->data_end);
    put64(out + 72, b->byte_len);
    put64(out + 80, (uint64_t)b->first_ts);
    put64(out + 88, (uint64_t)b->last_ts);
    put32(out + 124, crc32c(wal->crc_seed, out, 124));
}

void fmt_blk_frontier(uint8_t *out, const walfs_t *wal, const block_t *b, uint64_t count, uint64_t data_end)
{
    blk_common(out, wal, b, BLK_KIND_FRONTIER);
    put64(out + 48, b->first_gid);
    put64(out + 56, count);
    put64(out + 64, data_end);
    put32(out + 72, b->n_quar ? 0 : FRONTIER_CLEAN); /* a run with quarantined records verifies at every open */
    put32(out + 124, crc32c(wal->crc_seed, out, 124));
}

void fmt_blk_carve(uint8_t *out, const walfs_t *wal, uint64_t seg_id, uint32_t index, uint32_t class_size,
                   uint64_t carve_id)
{
    memset(out, 0, BLK_HDR_SIZE);
    memcpy(out, BLK_MAGIC, 8);
    put16(out + 8, RUN_VERSION_SMALL);
    put16(out + 10, BLK_KIND_CARVE);
    put64(out + 16, wal->uuid);
    put64(out + 24, seg_id);
    put32(out + 32, index);
    put64(out + 96, class_size);
    put64(out + 104, carve_id);
    put32(out + 124, crc32c(wal->crc_seed, out, 124));
}

/* Parses any kind; checks that it belongs at (segment, index). A version 2 header also
 * carries its run size and slot, which the caller checks against the place it read. */
int fmt_blk_parse(const uint8_t *in, const walfs_t *wal, uint64_t seg_id, uint32_t index, uint16_t kind,
                  blk_hdr_t *h)
{
    if (memcmp(in, BLK_MAGIC, 8) != 0) return -EUCLEAN;
    if (get32(in + 124) != crc32c(wal->crc_seed, in, 124)) return -EBADMSG;
    uint16_t version = get16(in + 8);
    if ((version != FORMAT_VERSION && version != RUN_VERSION_SMALL) || get16(in + 10) != kind) return -EUCLEAN;
    if (get64(in + 16) != wal->uuid || get64(in + 24) != seg_id || get32(in + 32) != index)
        return -EUCLEAN;
    h->version = version;
    h->n_blocks = get32(in + 12);
    h->stream_no = get32(in + 36);
    h->first_offset = get64(in + 40);
    int small = version == RUN_VERSION_SMALL, carve = kind == BLK_KIND_CARVE;
    h->run_size = !small ? 0 : carve ? get64(in + 96) : get32(in + 96);
    h->slot = small && !carve ? get32(in + 100) : 0;
    h->carve_id = small ? get64(in + 104) : 0;
    h->src_seg = small && !carve ? get64(in + 112) : 0;
    /* A version 2 run header is a small run's (n_blocks 0), a version 1 one a block run's. */
    if (kind != BLK_KIND_CARVE && (version == RUN_VERSION_SMALL) != (h->n_blocks == 0)) return -EUCLEAN;
    if (kind == BLK_KIND_CARVE && version != RUN_VERSION_SMALL) return -EUCLEAN;
    if (kind == BLK_KIND_OPEN) {
        h->first_byte = get64(in + 48);
        h->first_gid = get64(in + 56);
    } else if (kind == BLK_KIND_FRONTIER) {
        h->first_gid = get64(in + 48);
        h->count = get64(in + 56);
        h->data_end = get64(in + 64);
        h->flags = get32(in + 72);
    } else if (kind == BLK_KIND_SEAL) {
        h->count = get64(in + 48);
        h->last_gid = get64(in + 56);
        h->data_end = get64(in + 64);
        h->byte_len = get64(in + 72);
        h->first_ts = (int64_t)get64(in + 80);
        h->last_ts = (int64_t)get64(in + 88);
    }
    return 0;
}

/* ---- records and slots ---- */

void fmt_rec_header(uint8_t *out, uint32_t value_len, uint64_t gid, int64_t ts,
                    uint32_t meta_len, uint32_t batch_left, uint32_t stream_no)
{
    put32(out + 4, value_len);
    put64(out + 8, gid);
    put64(out + 16, (uint64_t)ts);
    put32(out + 24, meta_len);
    put32(out + 28, batch_left);
    put32(out + 32, stream_no);
}

void fmt_rec_seal(uint8_t *hdr, uint32_t seed, const uint8_t *body, size_t body_len)
{
    uint32_t c = crc32c(seed, hdr + 4, REC_HDR_SIZE - 4);
    put32(hdr, crc32c(c, body, body_len));
}

/* Seals four records whose bodies follow their headers in memory (staged records): the
 * same CRCs as four fmt_rec_seal calls, computed in one interleaved pass. */
void fmt_rec_seal_x4(uint8_t *const *hdr, uint32_t seed, const size_t *body_len)
{
    const uint8_t *p[4];
    size_t n[4];
    uint32_t c[4];
    for (int k = 0; k < 4; k++) {
        p[k] = hdr[k] + 4;
        n[k] = REC_HDR_SIZE - 4 + body_len[k];
    }
    crc32c_x4(seed, p, n, c);
    for (int k = 0; k < 4; k++) put32(hdr[k], c[k]);
}

void fmt_rec_parse(const uint8_t *in, rec_hdr_t *r)
{
    r->crc = get32(in);
    r->value_len = get32(in + 4);
    r->gid = get64(in + 8);
    r->ts = (int64_t)get64(in + 16);
    r->meta_len = get32(in + 24);
    r->batch_left = get32(in + 28);
    r->stream_no = get32(in + 32);
}

int fmt_rec_check(const uint8_t *in, uint32_t seed, const rec_hdr_t *r)
{
    uint32_t c = crc32c(seed, in + 4, REC_HDR_SIZE - 4);
    c = crc32c(c, in + REC_HDR_SIZE, (size_t)r->meta_len + r->value_len);
    return c == r->crc ? 0 : -EBADMSG;
}

/* Checks a queue of n (0-4) located records, entries `stride` bytes apart, each beginning
 * with a rec_at_t: four at once when there are four, one at a time otherwise; returns how
 * many lead the queue intact (n: all). The one check of queued records that every reader
 * uses (the byte view, the Kafka batch); the entries are read in place, not copied. */
int fmt_rec_check_q(const void *q, size_t stride, uint32_t seed, int n)
{
    const rec_at_t *at[4];
    for (int k = 0; k < n; k++) at[k] = (const rec_at_t *)((const char *)q + (size_t)k * stride);
    if (n == 4) {
        const uint8_t *p[4];
        size_t len[4];
        uint32_t c[4];
        for (int k = 0; k < 4; k++) {
            p[k] = at[k]->p + 4;
            len[k] = REC_HDR_SIZE - 4 + (size_t)at[k]->r.meta_len + at[k]->r.value_len;
        }
        crc32c_x4(seed, p, len, c);
        for (int k = 0; k < 4; k++)
            if (c[k] != at[k]->r.crc) return k;
        return 4;
    }
    for (int k = 0; k < n; k++)
        if (fmt_rec_check(at[k]->p, seed, &at[k]->r)) return k;
    return n;
}

void fmt_slot(uint8_t *out, uint32_t pos, uint32_t gid_delta, uint32_t view_delta)
{
    put32(out, pos);
    put32(out + 4, gid_delta);
    put32(out + 8, view_delta);
}

void fmt_slot_parse(const uint8_t *in, slot_t *s)
{
    s->pos = get32(in);
    s->gid_delta = get32(in + 4);
    s->view_delta = get32(in + 8);
}
