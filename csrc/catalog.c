/* catalog.c: streams.cat (stream definitions, trims, floors) and the stream table.
 * Every entry is fdatasync()ed before the call that wrote it returns. */
#include "internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define CAT_NAME "streams.cat"

stream_t *stream_get(walfs_t *wal, uint32_t no)
{
    if (no >= atomic_load(&wal->n_streams)) return NULL;
    return wal->chunks[no / STREAM_CHUNK][no % STREAM_CHUNK];
}

/* Under wal->lock (or during open). The caller fills it in (its name: name_len bytes,
 * at most MAX_NAME), then publishes it by incrementing wal->n_streams. */
stream_t *stream_new(walfs_t *wal, uint32_t name_len)
{
    size_t no = atomic_load(&wal->n_streams);
    if (no >= (size_t)STREAM_CHUNK * STREAM_CHUNKS || name_len > MAX_NAME) return NULL;
    stream_t ***chunk = &wal->chunks[no / STREAM_CHUNK];
    if (!*chunk && !(*chunk = calloc(STREAM_CHUNK, sizeof(stream_t *)))) return NULL;
    stream_t *s = calloc(1, sizeof(*s) + name_len + 1);
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->append_lock, NULL);
    s->no = (uint32_t)no;
    (*chunk)[no % STREAM_CHUNK] = s;
    return s;
}

/* The stream table's index by identity (org, partition, topic hash), so that finding a
 * stream by name costs one probe, not a scan of every stream (100,000 topics: each new one
 * looked for first). Open addressing over stream_no + 1 (0: empty), at most half full.
 * Nothing is removed: a deleted stream's entry stays and no longer matches; a number
 * reused after a failed create is checked like any other. Under wal->lock (or open). */
static size_t stream_slot(uint64_t org_id, uint32_t partition, const uint8_t *topic_hash, size_t cap)
{
    uint64_t h;
    memcpy(&h, topic_hash, 8); /* a hash already (blake3 of org and topic) */
    h ^= org_id * 0x9E3779B97F4A7C15ull ^ (uint64_t)partition * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    return (size_t)(h & (cap - 1));
}

static int stream_matches(const stream_t *s, uint64_t org_id, uint32_t partition, const uint8_t *topic_hash)
{
    return s && !s->deleted && s->org_id == org_id && s->partition == partition &&
           memcmp(s->hash, topic_hash, 16) == 0;
}

/* Room for one more entry (the only step that can fail: before the DEFINE is written). */
int stream_index_reserve(walfs_t *wal)
{
    if (2 * (wal->stream_ix_used + 1) > wal->stream_ix_cap) {
        size_t cap = wal->stream_ix_cap ? 2 * wal->stream_ix_cap : 1024;
        uint32_t *ix = calloc(cap, sizeof(*ix));
        if (!ix) return -ENOMEM;
        for (size_t i = 0; i < wal->stream_ix_cap; i++) {
            uint32_t v = wal->stream_ix[i];
            if (!v) continue;
            const stream_t *o = wal->chunks[(v - 1) / STREAM_CHUNK][(v - 1) % STREAM_CHUNK];
            if (!o) continue; /* a failed create's number, not reused yet */
            size_t j = stream_slot(o->org_id, o->partition, o->hash, cap);
            while (ix[j]) j = (j + 1) & (cap - 1);
            ix[j] = v;
        }
        free(wal->stream_ix);
        wal->stream_ix = ix;
        wal->stream_ix_cap = cap;
    }
    return 0;
}

/* After stream_index_reserve. */
void stream_index_add(walfs_t *wal, const stream_t *s)
{
    size_t j = stream_slot(s->org_id, s->partition, s->hash, wal->stream_ix_cap);
    while (wal->stream_ix[j]) j = (j + 1) & (wal->stream_ix_cap - 1);
    wal->stream_ix[j] = s->no + 1;
    wal->stream_ix_used++;
}

stream_t *stream_find(walfs_t *wal, uint64_t org_id, uint32_t partition, const uint8_t *topic_hash)
{
    if (!wal->stream_ix_cap) return NULL;
    for (size_t j = stream_slot(org_id, partition, topic_hash, wal->stream_ix_cap); wal->stream_ix[j];
         j = (j + 1) & (wal->stream_ix_cap - 1)) {
        stream_t *s = stream_get(wal, wal->stream_ix[j] - 1);
        if (stream_matches(s, org_id, partition, topic_hash)) return s;
    }
    return NULL;
}

int walfs_stream_ids(walfs_t *wal, uint32_t first, walfs_stream_id_t *out, uint32_t max)
{
    uint32_t n = 0;
    for (stream_t *s; n < max && (s = stream_get(wal, first + n)); n++) {
        walfs_stream_id_t *o = &out[n];
        o->stream_no = s->no;
        o->partition = s->partition;
        o->org_id = s->org_id;
        memcpy(o->topic_hash, s->hash, 16);
        o->deleted = (uint32_t)s->deleted;
        o->name_len = s->name_len;
        memcpy(o->name, s->name, s->name_len);
    }
    return (int)n;
}

void stream_free(stream_t *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n_blocks; i++) free(s->blocks[i]);
    free(s->blocks);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->append_lock);
    free(s);
}

int stream_add_block(stream_t *s, block_t *b)
{
    if (s->n_blocks == s->cap_blocks) {
        size_t cap = s->cap_blocks ? s->cap_blocks * 2 : 4;
        block_t **n = realloc(s->blocks, cap * sizeof(*n));
        if (!n) return -ENOMEM;
        s->blocks = n;
        s->cap_blocks = cap;
    }
    s->blocks[s->n_blocks++] = b;
    return 0;
}

static int cat_create(walfs_t *wal)
{
    uint64_t uuid = 0;
    while (uuid == 0)
        if (getrandom(&uuid, sizeof(uuid), 0) != sizeof(uuid)) return -errno;
    int fd = openat(wal->dirfd, CAT_NAME ".tmp", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    uint8_t hdr[CAT_HDR_SIZE];
    fmt_cat_header(hdr, uuid, (uint64_t)now_ms(), wal->opt.segment_size, wal->opt.block_size);
    int rc = 0;
    if (pwrite(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) || fsync(fd) != 0) rc = errno ? -errno : -EIO;
    close(fd);
    /* The rename makes a half-created catalog impossible. */
    if (!rc && renameat(wal->dirfd, CAT_NAME ".tmp", wal->dirfd, CAT_NAME) != 0) rc = -errno;
    if (!rc) rc = fsync_dir(wal->dirfd);
    return rc;
}

/* The catalog's list of segment files is sorted by id (SEGMENT entries come in creation
 * order, ids only grow). */
cat_seg_t *cat_seg_find(const walfs_t *wal, uint64_t id)
{
    size_t lo = 0, hi = wal->n_cat_segs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (wal->cat_segs[mid].id == id) return &wal->cat_segs[mid];
        if (wal->cat_segs[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static int cat_seg_add(walfs_t *wal, uint64_t id)
{
    if (wal->n_cat_segs && wal->cat_segs[wal->n_cat_segs - 1].id >= id) return -EUCLEAN;
    if (wal->n_cat_segs == wal->cap_cat_segs) {
        size_t cap = wal->cap_cat_segs ? wal->cap_cat_segs * 2 : 16;
        cat_seg_t *n = realloc(wal->cat_segs, cap * sizeof(*n));
        if (!n) return -ENOMEM;
        wal->cat_segs = n;
        wal->cap_cat_segs = cap;
    }
    wal->cat_segs[wal->n_cat_segs++] = (cat_seg_t){id, 0};
    return 0;
}

/* Applies one entry. merge: the entries come from a catalog a writer has rewritten
 * since this handle read it (cat_refresh), so streams it knows are defined again. */
static int apply(walfs_t *wal, const cat_entry_t *e, int merge)
{
    stream_t *s;
    switch (e->type) {
    case CAT_DEFINE:
        if (merge && e->stream_no < atomic_load(&wal->n_streams)) {
            s = stream_get(wal, e->stream_no);
            return s && !memcmp(s->hash, e->hash, 16) && s->org_id == e->org_id ? 0 : -EUCLEAN;
        }
        if (e->stream_no != atomic_load(&wal->n_streams)) return -EUCLEAN;
        if (!(s = stream_new(wal, e->name_len))) return -ENOMEM;
        s->partition = e->partition;
        s->org_id = e->org_id;
        memcpy(s->hash, e->hash, 16);
        s->name_len = e->name_len;
        memcpy(s->name, e->name, e->name_len);
        if (stream_index_reserve(wal)) return -ENOMEM;
        stream_index_add(wal, s);
        atomic_fetch_add(&wal->n_streams, 1);
        return 0;
    case CAT_TRIM:
        if (!(s = stream_get(wal, e->stream_no))) return -EUCLEAN;
        if (e->a > s->low_offset) s->low_offset = e->a;
        return 0;
    case CAT_FLOOR:
        if (!(s = stream_get(wal, e->stream_no))) return -EUCLEAN;
        if (e->a > s->next_offset) s->next_offset = e->a;
        if (e->b > s->next_byte) s->next_byte = e->b;
        if (e->c > wal->next_gid) wal->next_gid = e->c;
        if (e->a > s->floor_offset) s->floor_offset = e->a;
        if (e->b > s->floor_byte) s->floor_byte = e->b;
        if (e->c > wal->floor_gid) wal->floor_gid = e->c;
        return 0;
    case CAT_OPEN:
        if (e->a > wal->epoch) wal->epoch = e->a;
        return 0;
    case CAT_DELETE:
        if (!(s = stream_get(wal, e->stream_no))) return -EUCLEAN;
        s->deleted = 1;
        return 0;
    case CAT_SEGMENT: {
        if (merge && cat_seg_find(wal, e->a)) return 0;
        return cat_seg_add(wal, e->a);
    }
    case CAT_SEGMENT_GONE: {
        cat_seg_t *cs = cat_seg_find(wal, e->a);
        if (!cs || cs->gone) return merge ? 0 : -EUCLEAN;
        cs->gone = 1;
        return 0;
    }
    }
    return -EUCLEAN;
}

/* Torn-tail rule: entries are appended one pwrite at a time and fdatasync()ed before the
 * next, and a failed append is truncated away, so a crash can leave at most ONE incomplete
 * entry, at the very end. A bad entry at `pos` is therefore a torn tail exactly when the
 * bytes from it to the end of the file are no longer than the longest entry and no valid
 * entry (crc included) starts anywhere after it. Anything else is damage. */
static int torn_tail(const walfs_t *wal, const uint8_t *buf, size_t pos, size_t size)
{
    if (size - pos > CAT_MAX_ENTRY) return 0;
    cat_entry_t e;
    const char *why;
    for (size_t q = pos + 1; q + 8 <= size; q++)
        if (fmt_cat_entry_parse(buf + q, size - q, wal->crc_seed, &e, &why)) return 0;
    return 1;
}

/* Applies the entries of buf[0, size) (file bytes from `base`) up to a torn tail, and
 * counts them in wal->cat_entries; returns the bytes they take, or -EUCLEAN (with a
 * message naming the file and byte offset) for a damaged entry, or another -errno. */
static int64_t apply_all(walfs_t *wal, const uint8_t *buf, size_t size, int merge, uint64_t base)
{
    size_t pos = 0;
    cat_entry_t e;
    while (pos < size) {
        const char *why = "";
        size_t len = fmt_cat_entry_parse(buf + pos, size - pos, wal->crc_seed, &e, &why);
        if (len == 0) {
            if (torn_tail(wal, buf, pos, size)) break;
            wal_damage(wal, "%s/" CAT_NAME ": entry at byte %" PRIu64 " is damaged (%s) and is not a torn tail: %zu bytes follow it",
                       wal->dir, base + pos, why, size - pos);
            return -EUCLEAN;
        }
        int rc = apply(wal, &e, merge);
        if (rc) {
            if (rc == -EUCLEAN && (e.type == CAT_SEGMENT || e.type == CAT_SEGMENT_GONE))
                wal_damage(wal, "%s/" CAT_NAME ": entry at byte %" PRIu64 " (type %u, segment %" PRIu64 ") does not fit the entries before it",
                           wal->dir, base + pos, e.type, e.a);
            else if (rc == -EUCLEAN)
                wal_damage(wal, "%s/" CAT_NAME ": entry at byte %" PRIu64 " (type %u, stream %u) does not fit the entries before it",
                           wal->dir, base + pos, e.type, e.stream_no);
            return rc;
        }
        pos += len;
        wal->cat_entries++;
    }
    return (int64_t)pos;
}

int cat_open(walfs_t *wal)
{
    int rc;
    int fd = openat(wal->dirfd, CAT_NAME, (wal->opt.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && !wal->opt.read_only) {
        if ((rc = cat_create(wal))) return rc;
        fd = openat(wal->dirfd, CAT_NAME, O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) return -errno;
    wal->cat_fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) return -errno;
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return -ENOMEM;
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
        if (n <= 0) {
            free(buf);
            return n < 0 ? -errno : -EIO;
        }
        got += (size_t)n;
    }
    uint64_t seg_size;
    uint32_t block_size;
    rc = size >= CAT_HDR_SIZE ? fmt_cat_header_parse(buf, &wal->uuid, &seg_size, &block_size) : -EUCLEAN;
    if (rc) {
        wal_damage(wal, "%s/" CAT_NAME ": header (bytes 0..64) %s", wal->dir,
                   size < CAT_HDR_SIZE ? "is cut short" : rc == -EBADMSG ? "fails its crc"
                   : rc == -EPROTONOSUPPORT ? "has an unknown format version" : "has a bad magic");
        free(buf);
        return rc;
    }
    wal->opt.segment_size = seg_size;
    wal->opt.block_size = block_size;
    wal->cat_version = fmt_cat_header_version(buf);
    wal->crc_seed = crc_seed_for(wal->uuid);
    int64_t used = apply_all(wal, buf + CAT_HDR_SIZE, size - CAT_HDR_SIZE, 0, CAT_HDR_SIZE);
    free(buf);
    if (used < 0) return (int)used;
    size_t pos = CAT_HDR_SIZE + (size_t)used;
    wal->cat_end = pos;
    wal->cat_torn = size - pos; /* cut by cat_cut_torn once recovery found no damage */
    return 0;
}

/* A crash in the middle of an append (proven by torn_tail): nothing after it was ever
 * acknowledged. Cut only after recovery judged the rest: a catalog shorter than the
 * segments prove is damage, and damaged files are left as they are. */
int cat_cut_torn(walfs_t *wal)
{
    if (!wal->cat_torn) return 0;
    wal_log(wal, CAT_NAME ": cutting %" PRIu64 " bytes of torn tail at byte %" PRIu64, wal->cat_torn, wal->cat_end);
    if (!wal->opt.read_only && (ftruncate(wal->cat_fd, (off_t)wal->cat_end) != 0 || fdatasync(wal->cat_fd) != 0))
        return -errno;
    wal->cat_torn = 0;
    return 0;
}

/* Read-only opens: applies entries a live writer appended since the catalog was read
 * (a trim written just before its segments were reclaimed, say). If the writer has
 * compacted the catalog meanwhile (a new file under the same name), reads that one whole. */
int cat_refresh(walfs_t *wal)
{
    struct stat st, named;
    if (fstat(wal->cat_fd, &st) != 0) return -errno;
    if (fstatat(wal->dirfd, CAT_NAME, &named, 0) == 0 && named.st_ino != st.st_ino) {
        int fd = openat(wal->dirfd, CAT_NAME, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -errno;
        if (fstat(fd, &st) != 0 || st.st_size < CAT_HDR_SIZE) {
            close(fd);
            return -EUCLEAN;
        }
        close(wal->cat_fd);
        wal->cat_fd = fd;
        wal->cat_end = CAT_HDR_SIZE;
        wal->n_cat_segs = 0; /* the new file lists the segments that are left */
    }
    if ((uint64_t)st.st_size <= wal->cat_end) return 0;
    size_t size = (size_t)st.st_size - wal->cat_end;
    uint8_t *buf = malloc(size);
    if (!buf) return -ENOMEM;
    ssize_t n = pread(wal->cat_fd, buf, size, (off_t)wal->cat_end);
    int64_t got = n > 0 ? apply_all(wal, buf, (size_t)n, 1, wal->cat_end) : 0;
    free(buf);
    if (got < 0) return (int)got;
    wal->cat_end += (uint64_t)got;
    return 0;
}

/* Compaction: once most entries are dead (every trim appends one, and a process that
 * trims often would grow the catalog without end), the catalog is rewritten with one
 * entry per fact still needed: each stream's DEFINE, its TRIM and FLOOR if any, and the
 * current epoch. The new file is written beside the old one, fsynced and renamed over
 * it, so a crash leaves one or the other, both complete. Under wal->lock (and so never
 * during another catalog append); epoch changes take wal->lock too. */
#define CAT_COMPACT_MIN 1024

static int cat_compact(walfs_t *wal, int upgrade)
{
    size_t ns = atomic_load(&wal->n_streams);
    size_t cap = CAT_HDR_SIZE + ns * (4 * 64 + MAX_NAME) + 64 + wal->n_segs * 16;
    uint8_t *buf = malloc(cap);
    if (!buf) return -ENOMEM;
    int rc = 0;
    if (pread(wal->cat_fd, buf, CAT_HDR_SIZE, 0) != CAT_HDR_SIZE) { /* the header as it is */
        free(buf);
        return -EIO;
    }
    if (upgrade) fmt_cat_header_upgrade(buf);
    size_t len = CAT_HDR_SIZE;
    uint64_t entries = 0;
    /* Catalog v2: the segment files that exist (reclaimed ones are gone from disk before
     * any compaction runs: walfs_reclaim unlinks before it compacts). */
    for (size_t i = 0; (upgrade || wal->cat_version >= 2) && i < wal->n_segs; i++) {
        len += fmt_cat_segment(buf + len, wal->crc_seed, CAT_SEGMENT, wal->segs[i]->id);
        entries++;
    }
    for (size_t i = 0; i < ns; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        len += fmt_cat_define(buf + len, wal->crc_seed, s);
        pthread_mutex_lock(&s->lock);
        uint64_t low = s->low_offset, floor_offset = s->floor_offset, floor_byte = s->floor_byte;
        pthread_mutex_unlock(&s->lock);
        entries++;
        if (low) {
            len += fmt_cat_trim(buf + len, wal->crc_seed, s->no, low);
            entries++;
        }
        if (floor_offset || floor_byte) {
            len += fmt_cat_floor(buf + len, wal->crc_seed, s->no, floor_offset, floor_byte, wal->floor_gid);
            entries++;
        }
        if (s->deleted) {
            len += fmt_cat_delete(buf + len, wal->crc_seed, s->no);
            entries++;
        }
    }
    len += fmt_cat_open(buf + len, wal->crc_seed, wal->epoch);
    entries++;
    int fd = openat(wal->dirfd, CAT_NAME ".tmp", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) rc = -errno;
    if (!rc && (rc = fault_hit(wal, WALFS_FAULT_WRITE)) == 0) {
        size_t done = 0;
        while (!rc && done < len) {
            ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);
            if (n <= 0) rc = n < 0 ? -errno : -EIO;
            else done += (size_t)n;
        }
    }
    if (!rc && fsync(fd) != 0) rc = -errno;
    if (!rc && renameat(wal->dirfd, CAT_NAME ".tmp", wal->dirfd, CAT_NAME) != 0) rc = -errno;
    free(buf);
    if (rc) {
        if (fd >= 0) close(fd);
        unlinkat(wal->dirfd, CAT_NAME ".tmp", 0);
        return rc; /* the old catalog stays in use, whole */
    }
    close(wal->cat_fd);
    wal->cat_fd = fd;
    wal->cat_end = len;
    wal_info(wal, "catalog: compacted %" PRIu64 " entries to %" PRIu64 "%s", wal->cat_entries, entries,
             upgrade ? " (upgraded to version 2)" : "");
    wal->cat_entries = entries;
    if (upgrade) wal->cat_version = CAT_VERSION;
    /* The rename is durable once the directory is; until then either file is complete,
     * but entries appended to the new one must not outlive a name that may revert: a
     * failed directory fsync fails the WAL like a failed catalog fdatasync. */
    if ((rc = fsync_dir(wal->dirfd))) atomic_store(&wal->failed, rc);
    return rc;
}

/* Under wal->lock. */
int cat_compact_if_due(walfs_t *wal)
{
    if (wal->opt.read_only) return 0;
    uint64_t live = 3 * (uint64_t)atomic_load(&wal->n_streams) + 1 + wal->n_segs;
    uint64_t min = wal->opt.test_mode ? 16 : CAT_COMPACT_MIN; /* tests race it often */
    if (wal->cat_entries < min || wal->cat_entries < 4 * live) return 0;
    return cat_compact(wal, 0);
}

/* Under wal->lock. */
int cat_append(walfs_t *wal, const uint8_t *buf, size_t len)
{
    return cat_append_n(wal, buf, len, 1);
}

/* Under wal->lock: n entries in one write and one fdatasync. */
int cat_append_n(walfs_t *wal, const uint8_t *buf, size_t len, uint64_t n_entries)
{
    if (wal->opt.read_only) return -EROFS;
    int rc = fault_hit(wal, WALFS_FAULT_WRITE);
    if (rc) return rc;
    ssize_t n = pwrite(wal->cat_fd, buf, len, (off_t)wal->cat_end);
    if (n != (ssize_t)len) {
        rc = n < 0 ? -errno : -ENOSPC;
        /* Leave no partial entry behind for the next append to follow. */
        if (ftruncate(wal->cat_fd, (off_t)wal->cat_end) != 0) wal_log(wal, "catalog truncate failed");
        return rc;
    }
    if ((rc = fault_hit(wal, WALFS_FAULT_SYNC)) || fdatasync(wal->cat_fd) != 0) {
        rc = rc ? rc : -errno;
        atomic_store(&wal->failed, rc);
        return rc;
    }
    wal->cat_end += len;
    wal->cat_entries += n_entries;
    return 0;
}

/* Durable-end marks: a FLOOR entry for every stream whose durable end passed its highest
 * FLOOR, appended after `pre` (pre_len bytes, pre_n entries) in one write. Recovery of a
 * version 2 catalog requires each stream's runs to reach its FLOOR (above the low
 * watermark): a deleted segment or a lost run header that shortens a stream below what a
 * mark proved durable is damage, not a shorter stream. Marks are written when a segment
 * is created, at reclamation and at close: never on the append path. Under wal->lock. */
static int cat_append_marks(walfs_t *wal, const uint8_t *pre, size_t pre_len, uint64_t pre_n)
{
    size_t ns = atomic_load(&wal->n_streams);
    uint8_t *buf = malloc(pre_len + ns * 40 + 1);
    if (!buf) return -ENOMEM;
    if (pre_len) memcpy(buf, pre, pre_len);
    size_t len = pre_len;
    uint64_t n = pre_n;
    uint64_t next_gid = __atomic_load_n(&wal->next_gid, __ATOMIC_RELAXED);
    for (size_t i = 0; i < ns; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        pthread_mutex_lock(&s->lock);
        if (!s->deleted && s->durable_offset > s->floor_offset) {
            len += fmt_cat_floor(buf + len, wal->crc_seed, s->no, s->durable_offset, s->durable_byte, next_gid);
            n++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    int rc = n ? cat_append_n(wal, buf, len, n) : 0;
    if (!rc && n > pre_n) {
        /* Raise the in-memory floors to what was written (read back from the entries). */
        for (size_t pos = pre_len; pos < len; pos += 40) {
            cat_entry_t e;
            const char *why;
            if (!fmt_cat_entry_parse(buf + pos, len - pos, wal->crc_seed, &e, &why)) break;
            stream_t *s = stream_get(wal, e.stream_no);
            pthread_mutex_lock(&s->lock);
            if (e.a > s->floor_offset) s->floor_offset = e.a;
            if (e.b > s->floor_byte) s->floor_byte = e.b;
            pthread_mutex_unlock(&s->lock);
        }
        if (next_gid > wal->floor_gid) wal->floor_gid = next_gid;
    }
    free(buf);
    return rc;
}

/* Under wal->lock: a new segment file, durable on disk, enters the catalog (version 2)
 * before any run is allocated in it, together with the durable-end marks. */
int cat_note_segment(walfs_t *wal, uint64_t seg_id)
{
    if (wal->cat_version < 2) return 0;
    uint8_t buf[16];
    size_t len = fmt_cat_segment(buf, wal->crc_seed, CAT_SEGMENT, seg_id);
    return cat_append_marks(wal, buf, len, 1);
}

/* After a sync round (sync.c, at most every MARK_INTERVAL_MS): the marks alone. A failed
 * mark costs only protection; a failed catalog fdatasync has failed the WAL already. */
int cat_mark_ends(walfs_t *wal)
{
    pthread_mutex_lock(&wal->lock);
    int rc = cat_append_marks(wal, NULL, 0, 0);
    if (!rc) {
        int crc = cat_compact_if_due(wal);
        if (crc) wal_log(wal, "catalog compaction failed (%d); keeping the old catalog", crc);
    }
    pthread_mutex_unlock(&wal->lock);
    if (rc) wal_log(wal, "durable-end marks not written (%d)", rc);
    return rc;
}

/* At a writer's clean close, after the last sync: durable-end marks, then a version 1
 * catalog is upgraded (rewritten as version 2, listing the segment files). Upgrading at
 * close, not at open, lets the Python layer build its cursor manifest first (walfs/
 * consumer.py): a crash before the close leaves a version 1 directory, upgraded later. */
int cat_close(walfs_t *wal)
{
    pthread_mutex_lock(&wal->lock);
    int rc = cat_append_marks(wal, NULL, 0, 0);
    if (!rc && wal->cat_version < 2 && (rc = cat_compact(wal, 1)))
        wal_log(wal, "catalog upgrade to version 2 failed (%d); it stays version 1 until a later close", rc);
    pthread_mutex_unlock(&wal->lock);
    /* Marks and the upgrade are optional (the catalog stays whole); a failed fsync is not. */
    return atomic_load(&wal->failed);
}

/* Under wal->gid_lock: starts a new gid epoch (at open, or when a session used up 2^40). */
int cat_new_epoch(walfs_t *wal)
{
    uint8_t buf[16];
    uint64_t epoch = wal->epoch + 1;
    size_t len = fmt_cat_open(buf, wal->crc_seed, epoch);
    int rc = cat_append(wal, buf, len);
    if (rc) return rc;
    wal->epoch = epoch;
    if (wal->next_gid < epoch << GID_EPOCH_SHIFT) wal->next_gid = epoch << GID_EPOCH_SHIFT;
    return 0;
}
