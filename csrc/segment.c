/* segment.c: segment files. Creation is durable before use: fallocate the whole file,
 * write and sync its header, then sync the directory. */
#include "internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
    if (!seg->block_state) {
        free(seg);
        return NULL;
    }
    seg->id = id;
    seg->size = size;
    seg->n_blocks = n_blocks;
    seg->fd = -1;
    seg->map = MAP_FAILED;
    pthread_mutex_init(&seg->saves_lock, NULL);
    return seg;
}

void seg_free(segment_t *seg)
{
    if (!seg) return;
    if (seg->map != MAP_FAILED) munmap(seg->map, seg->size);
    if (seg->fd >= 0) close(seg->fd);
    saves_free(seg);
    pthread_mutex_destroy(&seg->saves_lock);
    free(seg->block_state);
    free(seg);
}

static int seg_map(segment_t *seg)
{
    seg->map = mmap(NULL, seg->size, PROT_READ, MAP_SHARED, seg->fd, 0);
    return seg->map == MAP_FAILED ? -errno : 0;
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
    if (!rc && fallocate(seg->fd, 0, 0, (off_t)seg->size) != 0) rc = -errno;
    if (rc) goto fail;
    uint8_t hdr[SEG_HDR_SIZE];
    fmt_seg_header(hdr, wal, id, wal->blocks_per_seg);
    if (pwrite(seg->fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
        rc = errno ? -errno : -EIO;
        goto fail;
    }
    if (fdatasync(seg->fd) != 0 || fsync_dir(wal->dirfd) != 0) {
        rc = -errno;
        goto fail;
    }
    if ((rc = seg_map(seg))) goto fail;
    if ((rc = seg_add(wal, seg))) goto fail;
    wal->next_seg_id++;
    *out = seg;
    return 0;
fail:
    unlinkat(wal->dirfd, name, 0);
    fsync_dir(wal->dirfd);
    seg_free(seg);
    return rc;
}

int seg_open(walfs_t *wal, uint64_t id, segment_t **out)
{
    char name[64];
    seg_path(wal, id, name, sizeof(name));
    int fd = openat(wal->dirfd, name, (wal->opt.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd < 0) return -errno;
    uint8_t hdr[SEG_HDR_SIZE];
    ssize_t n = pread(fd, hdr, sizeof(hdr), 0);
    uint64_t size;
    uint32_t bsize, nblocks;
    int rc = n == (ssize_t)sizeof(hdr) ? fmt_seg_header_parse(hdr, wal, id, &size, &bsize, &nblocks) : -EUCLEAN;
    if (rc) {
        close(fd);
        return rc;
    }
    if (bsize != wal->opt.block_size || size != wal->opt.segment_size) {
        /* Sizes are fixed per WAL: the catalog's first segment decided them. */
        close(fd);
        return -EUCLEAN;
    }
    segment_t *seg = seg_alloc(id, size, nblocks);
    if (!seg) {
        close(fd);
        return -ENOMEM;
    }
    seg->fd = fd;
    if ((rc = seg_map(seg))) {
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
