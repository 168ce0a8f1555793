/* catalog.c: streams.cat (stream definitions, trims, floors) and the stream table.
 * Every entry is fdatasync()ed before the call that wrote it returns. */
#include "internal.h"

#include <fcntl.h>
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

/* Under wal->lock (or during open). The caller fills it in, then publishes it by
 * incrementing wal->n_streams. */
stream_t *stream_new(walfs_t *wal)
{
    size_t no = atomic_load(&wal->n_streams);
    if (no >= (size_t)STREAM_CHUNK * STREAM_CHUNKS) return NULL;
    stream_t ***chunk = &wal->chunks[no / STREAM_CHUNK];
    if (!*chunk && !(*chunk = calloc(STREAM_CHUNK, sizeof(stream_t *)))) return NULL;
    stream_t *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->append_lock, NULL);
    s->no = (uint32_t)no;
    s->inflight_gid = UINT64_MAX;
    (*chunk)[no % STREAM_CHUNK] = s;
    return s;
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

static int apply(walfs_t *wal, const cat_entry_t *e)
{
    stream_t *s;
    switch (e->type) {
    case CAT_DEFINE:
        if (e->stream_no != atomic_load(&wal->n_streams)) return -EUCLEAN;
        if (!(s = stream_new(wal))) return -ENOMEM;
        s->partition = e->partition;
        s->org_id = e->org_id;
        memcpy(s->hash, e->hash, 16);
        s->name_len = e->name_len;
        memcpy(s->name, e->name, e->name_len);
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
        return 0;
    case CAT_OPEN:
        if (e->a > wal->epoch) wal->epoch = e->a;
        return 0;
    }
    return -EUCLEAN;
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
        free(buf);
        return rc;
    }
    wal->opt.segment_size = seg_size;
    wal->opt.block_size = block_size;
    wal->crc_seed = crc_seed_for(wal->uuid);
    size_t pos = CAT_HDR_SIZE;
    cat_entry_t e;
    while (pos < size) {
        size_t len = fmt_cat_entry_parse(buf + pos, size - pos, wal->crc_seed, &e);
        if (len == 0) break;
        if ((rc = apply(wal, &e))) {
            free(buf);
            return rc;
        }
        pos += len;
    }
    free(buf);
    if (pos < size) {
        /* A crash in the middle of an append: nothing after it was ever acknowledged. */
        wal_log(wal, "catalog: cutting %zu bytes of torn tail", size - pos);
        if (!wal->opt.read_only && (ftruncate(fd, (off_t)pos) != 0 || fdatasync(fd) != 0)) return -errno;
    }
    wal->cat_end = pos;
    return 0;
}

/* Read-only opens: applies entries a live writer appended since the catalog was read
 * (a trim written just before its segments were reclaimed, say). */
int cat_refresh(walfs_t *wal)
{
    struct stat st;
    if (fstat(wal->cat_fd, &st) != 0) return -errno;
    if ((uint64_t)st.st_size <= wal->cat_end) return 0;
    size_t size = (size_t)st.st_size - wal->cat_end;
    uint8_t *buf = malloc(size);
    if (!buf) return -ENOMEM;
    ssize_t n = pread(wal->cat_fd, buf, size, (off_t)wal->cat_end);
    size_t pos = 0;
    int rc = 0;
    cat_entry_t e;
    while (n > 0 && pos < (size_t)n) {
        size_t len = fmt_cat_entry_parse(buf + pos, (size_t)n - pos, wal->crc_seed, &e);
        if (len == 0 || (rc = apply(wal, &e))) break;
        pos += len;
    }
    wal->cat_end += pos;
    free(buf);
    return rc;
}

/* Under wal->lock. */
int cat_append(walfs_t *wal, const uint8_t *buf, size_t len)
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
    return 0;
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
