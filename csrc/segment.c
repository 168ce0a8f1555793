/* segment.c: segment files. Creation is durable before use: the file at its full length
 * (sparse: its blocks are reserved as runs take them, allocator.c seg_reserve), its header
 * area fallocate()d, written and synced, then the directory synced. */
#include "internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

void seg_path(const walfs_t *wal, uint64_t id, char *out, size_t outlen)
{
    (void)wal;
    snprintf(out, outlen, "seg-%016" PRIx64 ".wal", id);
}

static segment_t *seg_alloc(uint64_t id, uint64_t size, uint32_t n_blocks)
{
    segment_t *seg = calloc(1, sizeof(*seg));
    if (!seg) return NULL;
    seg->block_state = calloc(n_blocks ? n_blocks : 1, 1);
    seg->carves = calloc(n_blocks ? n_blocks : 1, sizeof(*seg->carves));
    if (!seg->block_state || !seg->carves) {
        free(seg->block_state);
        free(seg->carves);
        free(seg);
        return NULL;
    }
    seg->id = id;
    seg->size = size;
    seg->n_blocks = n_blocks;
    seg->fd = -1;
    seg->map = MAP_FAILED;
    seg->wmap = MAP_FAILED;
    pthread_mutex_init(&seg->saves_lock, NULL);
    return seg;
}

void seg_free(segment_t *seg)
{
    if (!seg) return;
    if (seg->map != MAP_FAILED) munmap(seg->map, seg->size);
    if (seg->wmap != MAP_FAILED) munmap(seg->wmap, seg->size);
    if (seg->fd >= 0) close(seg->fd);
    saves_free(seg);
    pthread_mutex_destroy(&seg->saves_lock);
    free(seg->block_state);
    for (uint32_t i = 0; i < seg->n_blocks; i++) free(seg->carves[i]);
    free(seg->carves);
    free(seg);
}

/* Readers use the read-only view; a writer also gets a writable one, used only by
 * seg_mwritev (small appends), so that no read path can scribble on the file. */
static int seg_map(const walfs_t *wal, segment_t *seg)
{
    seg->map = mmap(NULL, seg->size, PROT_READ, MAP_SHARED, seg->fd, 0);
    if (seg->map == MAP_FAILED) return -errno;
    if (wal->opt.read_only) return 0;
    seg->wmap = mmap(NULL, seg->size, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    return seg->wmap == MAP_FAILED ? -errno : 0;
}

int seg_add(walfs_t *wal, segment_t *seg)
{
    if (wal->n_segs == wal->cap_segs) {
        size_t cap = wal->cap_segs ? wal->cap_segs * 2 : 16;
        segment_t **n = realloc(wal->segs, cap * sizeof(*n));
        if (!n) return -ENOMEM;
        wal->segs = n;
        wal->cap_segs = cap;
    }
    wal->segs[wal->n_segs++] = seg;
    return 0;
}

/* Under wal->lock. */
int seg_create(walfs_t *wal, segment_t **out)
{
    char name[64];
    uint64_t id = wal->next_seg_id;
    seg_path(wal, id, name, sizeof(name));
    if (wal->opt.min_free_bytes) {
        /* The reserve keeps room for what must never fail for lack of space: catalog
         * entries (trims, reclamation's floors), cursor files, settings. */
        struct statvfs st;
        if (fstatvfs(wal->dirfd, &st) == 0 &&
            (uint64_t)st.f_bavail * st.f_frsize < wal->opt.segment_size + wal->opt.min_free_bytes)
            return -ENOSPC;
    }
    segment_t *seg = seg_alloc(id, wal->opt.segment_size, wal->blocks_per_seg);
    if (!seg) return -ENOMEM;
    int rc;
    seg->fd = openat(wal->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (seg->fd < 0) {
        rc = -errno;
        seg_free(seg);
        return rc;
    }
    rc = fault_hit(wal, WALFS_FAULT_ALLOC);
    if (!rc && (ftruncate(seg->fd, (off_t)seg->size) != 0 || fallocate(seg->fd, 0, 0, SEG_HDR_SIZE) != 0))
        rc = -errno;
    if (rc) goto fail;
    uint8_t hdr[SEG_HDR_SIZE];
    seg->created_ms = (uint64_t)now_ms();
    fmt_seg_header(hdr, wal, id, wal->blocks_per_seg, seg->created_ms);
    if (pwrite(seg->fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
        rc = errno ? -errno : -EIO;
        goto fail;
    }
    if (fdatasync(seg->fd) != 0 || fsync_dir(wal->dirfd) != 0) {
        rc = -errno;
        goto fail;
    }
    if ((rc = seg_map(wal, seg))) goto fail;
    /* Listed in the catalog (with the durable-end marks) only once it is durable, and
     * before any run is allocated in it: a file the catalog does not list can then only
     * be a creation cut short, with no run in it (recovery.c). */
    if ((rc = cat_note_segment(wal, id, seg->created_ms))) {
        if (!atomic_load(&wal->failed)) goto fail; /* the entry was truncated away */
        /* The catalog's fdatasync failed: its entry may be on disk, so the file stays. */
        wal->next_seg_id++;
        seg_free(seg);
        return rc;
    }
    wal->next_seg_id++;
    if ((rc = seg_add(wal, seg))) {
        seg_free(seg); /* listed and whole: the file stays, empty, for the next open */
        return rc;
    }
    *out = seg;
    return 0;
fail:
    unlinkat(wal->dirfd, name, 0);
    fsync_dir(wal->dirfd);
    seg_free(seg);
    return rc;
}

/* 1 if the file provably never held data: its header area is all zero (as far as the
 * file reaches) and no block of it starts with a valid run header. Creation writes and
 * syncs the header before any run is allocated, so such a file is a creation cut short.
 * Any read error: 0 (not proven). */
static int seg_never_used(walfs_t *wal, int fd, uint64_t id, uint64_t file_size, const uint8_t *hdr, size_t got)
{
    for (size_t i = 0; i < got; i++)
        if (hdr[i]) return 0;
    uint8_t blk[BLK_HDR_SIZE];
    for (uint64_t off = SEG_HDR_SIZE; off + BLK_HDR_SIZE <= file_size; off += wal->opt.block_size) {
        if (pread(fd, blk, sizeof(blk), (off_t)off) != (ssize_t)sizeof(blk)) return 0;
        blk_hdr_t h;
        uint32_t index = (uint32_t)((off - SEG_HDR_SIZE) / wal->opt.block_size);
        if (fmt_blk_parse(blk, wal, id, index, BLK_KIND_OPEN, &h) == 0) return 0;
        if (pread(fd, blk, sizeof(blk), (off_t)(off + BLK_CARVE_OFF)) == (ssize_t)sizeof(blk) &&
            fmt_blk_parse(blk, wal, id, index, BLK_KIND_CARVE, &h) == 0)
            return 0; /* a carved block: its runs may lie past slot 0 */
    }
    return 1;
}

/* A header that fails its checks (rc, n bytes read) is rebuilt from the catalog when it
 * proves the segment: a version 3 catalog lists it (a SEGMENT entry with its creation
 * time, no SEGMENT_GONE) and the file has the WAL's segment size. Creation syncs the
 * header before the SEGMENT entry, so a listed file had this very header: magic, header
 * version, the catalog's sizes, its id, the WAL's uuid, the creation time, the block count
 * the size holds. A writer writes it back durably (healed); a read-only open uses it in
 * memory. 0 when rebuilt, else rc unchanged. */
static int seg_rebuild_header(walfs_t *wal, int fd, uint64_t id, uint64_t file_size, int rc, ssize_t n)
{
    const cat_seg_t *cs = wal->cat_version >= 3 ? cat_seg_find(wal, id) : NULL;
    if (!cs || cs->gone || !cs->created_ms || file_size != wal->opt.segment_size) return rc;
    char name[64];
    seg_path(wal, id, name, sizeof(name));
    const char *why = n < SEG_HDR_SIZE         ? "is cut short"
                      : rc == -EBADMSG         ? "fails its crc"
                      : rc == -EPROTONOSUPPORT ? "has an unknown format version"
                                               : "has a bad magic, segment id or WAL uuid";
    wal->report.metadata_damaged++;
    if (wal->opt.read_only) {
        wal_log(wal, "%s: header %s; rebuilt in memory from streams.cat (a writer's open will write it)", name, why);
        return 0;
    }
    uint8_t hdr[SEG_HDR_SIZE];
    fmt_seg_header(hdr, wal, id, wal->blocks_per_seg, cs->created_ms);
    if (pwrite(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) || fdatasync(fd) != 0) {
        wal_damage(wal, "%s/%s: header %s, and writing it back from streams.cat failed: %s", wal->dir, name, why,
                   strerror(errno ? errno : EIO));
        return -EIO;
    }
    wal->report.healed++;
    wal_log(wal, "%s: header %s; rebuilt from streams.cat and rewritten (healed)", name, why);
    return 0;
}

/* Opens and maps segment `id`. Returns -ENOENT if it does not exist, -ENODATA if it
 * provably never held data (seg_never_used; the caller decides whether it may go), and
 * for anything else wrong -EUCLEAN or -EIO with a message naming the file (wal_damage).
 * Every size in the header is checked against the WAL's geometry and the file's real
 * size before the file is mapped: a mapping never reaches past the end of its file. */
int seg_open(walfs_t *wal, uint64_t id, segment_t **out)
{
    char name[64];
    seg_path(wal, id, name, sizeof(name));
    int fd = openat(wal->dirfd, name, (wal->opt.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e != ENOENT) wal_damage(wal, "%s/%s: cannot open: %s", wal->dir, name, strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        wal_damage(wal, "%s/%s: cannot stat: %s", wal->dir, name, strerror(e));
        return -e;
    }
    uint64_t file_size = (uint64_t)st.st_size;
    uint8_t hdr[SEG_HDR_SIZE];
    ssize_t n = pread(fd, hdr, sizeof(hdr), 0);
    if (n < 0) {
        int e = errno;
        close(fd);
        wal_damage(wal, "%s/%s: header unreadable: %s", wal->dir, name, strerror(e));
        return -EIO;
    }
    uint64_t size = 0, created = 0;
    uint32_t bsize = 0, nblocks = 0;
    int rc = n == (ssize_t)sizeof(hdr) ? fmt_seg_header_parse(hdr, wal, id, &size, &bsize, &nblocks, &created) : -EUCLEAN;
    if (rc && (rc = seg_rebuild_header(wal, fd, id, file_size, rc, n)) == -EIO) {
        close(fd);
        return rc;
    }
    if (!rc && size == 0) { /* rebuilt */
        size = wal->opt.segment_size;
        bsize = wal->opt.block_size;
        nblocks = wal->blocks_per_seg;
        created = cat_seg_find(wal, id)->created_ms;
    }
    if (rc && seg_never_used(wal, fd, id, file_size, hdr, (size_t)n)) {
        close(fd);
        return -ENODATA;
    }
    const char *why = NULL;
    if (rc)
        why = n < (ssize_t)sizeof(hdr) ? "header cut short (file of %llu bytes)"
              : rc == -EBADMSG         ? "header fails its crc"
              : rc == -EPROTONOSUPPORT ? "header has an unknown format version"
                                       : "header has a bad magic, segment id or WAL uuid";
    else if (bsize != wal->opt.block_size || size != wal->opt.segment_size)
        /* Sizes are fixed per WAL: the catalog decided them. */
        why = "header sizes differ from the catalog's";
    else if (nblocks != wal->blocks_per_seg)
        why = "header's block count does not fit the segment size";
    else if (file_size < size)
        why = "file is %llu bytes, shorter than its header says";
    if (why) {
        char msg[160];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(msg, sizeof(msg), why, (unsigned long long)file_size);
#pragma GCC diagnostic pop
        wal_damage(wal, "%s/%s: %s", wal->dir, name, msg);
        close(fd);
        return -EUCLEAN;
    }
    segment_t *seg = seg_alloc(id, size, nblocks);
    if (!seg) {
        close(fd);
        return -ENOMEM;
    }
    seg->fd = fd;
    seg->created_ms = created;
    if ((rc = seg_map(wal, seg))) {
        seg_free(seg);
        return rc;
    }
    *out = seg;
    return 0;
}

/* Under wal->lock; the segment is already out of every stream. */
int seg_delete(walfs_t *wal, segment_t *seg)
{
    char name[64];
    seg_path(wal, seg->id, name, sizeof(name));
    int rc = unlinkat(wal->dirfd, name, 0) == 0 ? 0 : -errno;
    wb_forget(wal, seg); /* before its fd closes: nothing queued or in flight stays on it */
    for (size_t i = 0; i < wal->n_segs; i++) {
        if (wal->segs[i] == seg) {
            memmove(wal->segs + i, wal->segs + i + 1, (wal->n_segs - i - 1) * sizeof(*wal->segs));
            wal->n_segs--;
            break;
        }
    }
    seg_free(seg);
    return rc;
}
