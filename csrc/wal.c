/* wal.c: opening and closing a WAL, the lock on its directory, streams and their info. */
#include "internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

void walfs_default_options(walfs_options_t *o)
{
    memset(o, 0, sizeof(*o));
    o->segment_size = 1ull << 30;
    o->block_size = 10u << 20;
    o->fsync_mode = WALFS_FSYNC_INTERVAL;
    o->fsync_interval_ms = 100;
}

static void wal_free(walfs_t *wal)
{
    size_t ns = atomic_load(&wal->n_streams);
    for (size_t i = 0; i < ns; i++) stream_free(stream_get(wal, (uint32_t)i));
    for (size_t c = 0; c < STREAM_CHUNKS; c++) free(wal->chunks[c]);
    for (size_t i = 0; i < wal->n_segs; i++) seg_free(wal->segs[i]);
    free(wal->segs);
    free(wal->seals);
    free(wal->cat_segs);
    if (wal->cat_fd >= 0) close(wal->cat_fd);
    if (wal->cat_fd2 >= 0) close(wal->cat_fd2);
    cat_ring_free(wal);
    if (wal->lockfd >= 0) close(wal->lockfd); /* releases the flock */
    if (wal->dirfd >= 0) close(wal->dirfd);
    pthread_mutex_destroy(&wal->lock);
    pthread_mutex_destroy(&wal->seal_lock);
    pthread_mutex_destroy(&wal->gid_lock);
    pthread_mutex_destroy(&wal->sync_lock);
    pthread_cond_destroy(&wal->sync_cond);
    pthread_cond_destroy(&wal->syncer_cond);
    free(wal);
}

static int has_segments(int dirfd)
{
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) found = strncmp(e->d_name, "seg-", 4) == 0;
    closedir(d);
    return found;
}

int walfs_open(const char *dir, const walfs_options_t *opts, walfs_t **out, char *err, size_t errlen)
{
    walfs_options_t o;
    if (opts)
        o = *opts;
    else
        walfs_default_options(&o);
#define FAIL(code, ...)                                  \
    do {                                                 \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        rc = (code);                                     \
        goto fail;                                       \
    } while (0)
    int rc = 0;
    walfs_t *wal = calloc(1, sizeof(*wal));
    if (!wal) return -ENOMEM;
    wal->dirfd = wal->lockfd = wal->cat_fd = wal->cat_fd2 = -1;
    pthread_mutex_init(&wal->lock, NULL);
    pthread_mutex_init(&wal->seal_lock, NULL);
    pthread_mutex_init(&wal->gid_lock, NULL);
    pthread_mutex_init(&wal->sync_lock, NULL);
    pthread_cond_init(&wal->sync_cond, NULL);
    pthread_cond_init(&wal->syncer_cond, NULL);
    snprintf(wal->dir, sizeof(wal->dir), "%s", dir);
    wal->opt = o;
    wal->next_seg_id = 1;
    if (o.fsync_mode < WALFS_FSYNC_NEVER || o.fsync_mode > WALFS_FSYNC_ALWAYS)
        FAIL(-EINVAL, "fsync mode must be never, interval or always");
    if (o.fsync_interval_ms == 0) wal->opt.fsync_interval_ms = 100;
    if (o.block_size < MIN_BLOCK_SIZE || o.block_size % 4096)
        FAIL(-EINVAL, "block_size must be a multiple of 4096, at least %d", MIN_BLOCK_SIZE);
    if (o.segment_size > MAX_SEGMENT_SIZE || o.segment_size < SEG_HDR_SIZE + (uint64_t)o.block_size)
        FAIL(-EINVAL, "segment_size must hold at least one block and be at most 2 GiB");

    wal->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (wal->dirfd < 0 && errno == ENOENT && !o.read_only) {
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) FAIL(-errno, "cannot create %s: %s", dir, strerror(errno));
        wal->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (wal->dirfd < 0) FAIL(-errno, "cannot open %s: %s", dir, strerror(errno));
    if (!o.read_only) {
        wal->lockfd = openat(wal->dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (wal->lockfd < 0) FAIL(-errno, "cannot open %s/LOCK: %s", dir, strerror(errno));
        if (flock(wal->lockfd, LOCK_EX | LOCK_NB) != 0)
            FAIL(errno == EWOULDBLOCK ? -EAGAIN : -errno, "%s is locked by another process", dir);
        if (faccessat(wal->dirfd, "streams.cat", F_OK, 0) != 0 &&
            faccessat(wal->dirfd, "streams.cat.mirror", F_OK, 0) != 0 && has_segments(wal->dirfd))
            FAIL(-EUCLEAN, "%s has segment files but no streams.cat", dir);
    }
    guard_install();
    if ((rc = cat_open(wal)))
        FAIL(rc, "cannot read %s/streams.cat: %s", dir, wal->damage[0] ? wal->damage : strerror(-rc));
    if (o.test_mode && o.read_only && getenv("WALFS_TEST_SCAN_DELAY_MS")) {
        /* Tests only: widens the window in which a writer may trim, compact the catalog and
         * reclaim segments between this open's catalog read and its segment scan. */
        usleep((useconds_t)atoi(getenv("WALFS_TEST_SCAN_DELAY_MS")) * 1000);
    }
    wal->blocks_per_seg = (uint32_t)((wal->opt.segment_size - SEG_HDR_SIZE) / wal->opt.block_size);
    if ((rc = recover(wal)))
        FAIL(rc, "recovery of %s failed: %s", dir, wal->damage[0] ? wal->damage : strerror(-rc));
    if ((rc = cat_cut_torn(wal))) FAIL(rc, "cannot cut the torn tail of %s/streams.cat: %s", dir, strerror(-rc));
    /* A damaged catalog copy is rewritten from the merged state, and a version 2 catalog
     * becomes version 3, before this open appends to it. */
    if ((rc = cat_heal_upgrade(wal, 0)))
        FAIL(rc, "cannot rewrite %s/streams.cat and its mirror: %s", dir, strerror(-rc));
    durable_init(wal);
    if (!o.read_only) {
        pthread_mutex_lock(&wal->gid_lock);
        pthread_mutex_lock(&wal->lock);
        rc = cat_new_epoch(wal);
        if (!rc) {
            int crc = cat_compact_if_due(wal); /* optional: the old catalog is whole */
            if (crc) wal_log(wal, "catalog compaction failed (%d); keeping the old catalog", crc);
        }
        pthread_mutex_unlock(&wal->lock);
        pthread_mutex_unlock(&wal->gid_lock);
        if (rc) FAIL(rc, "cannot write %s/streams.cat: %s", dir, strerror(-rc));
    }
    if ((rc = sync_init(wal))) FAIL(rc, "cannot start the sync thread");
    /* Recovery's cuts and pending seals become durable before any new append. */
    if (!o.read_only && (rc = sync_force(wal))) FAIL(rc, "sync after recovery failed: %s", strerror(-rc));
    *out = wal;
    return 0;
fail:
    sync_shutdown(wal);
    wal_free(wal);
    return rc;
#undef FAIL
}

int walfs_close(walfs_t *wal)
{
    if (!wal) return 0;
    int rc = 0;
    if (!wal->opt.read_only) {
        rc = atomic_load(&wal->failed);
        if (!rc) rc = sync_force(wal); /* data, then the seals it allowed */
        if (!rc) rc = sync_force(wal);
        if (!rc) rc = cat_close(wal); /* durable-end marks; a version 1 catalog is upgraded */
    }
    sync_shutdown(wal);
    wal_free(wal);
    return rc;
}

int walfs_recovery_report(walfs_t *wal, walfs_recovery_report_t *out)
{
    *out = wal->report;
    out->syncs = atomic_load(&wal->syncs);
    out->catalog_version = wal->cat_found;
    return 0;
}

int walfs_failed(walfs_t *wal)
{
    return atomic_load(&wal->failed);
}

int walfs_stream_open(walfs_t *wal, uint64_t org_id, uint32_t partition, const uint8_t *topic_hash,
                      const char *name, uint32_t name_len, int create, uint32_t *stream_no)
{
    if (name_len == 0 || name_len > MAX_NAME) return -EINVAL;
    pthread_mutex_lock(&wal->lock);
    int rc = -ENOENT;
    size_t n = atomic_load(&wal->n_streams);
    for (size_t i = 0; i < n; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        if (!s->deleted && s->org_id == org_id && s->partition == partition && memcmp(s->hash, topic_hash, 16) == 0) {
            rc = s->name_len == name_len && memcmp(s->name, name, name_len) == 0 ? 0 : -EEXIST;
            if (!rc) *stream_no = s->no;
            goto out;
        }
    }
    if (!create) goto out;
    if (wal->opt.read_only) {
        rc = -EROFS;
        goto out;
    }
    if ((rc = atomic_load(&wal->failed))) goto out;
    stream_t *s = stream_new(wal);
    if (!s) {
        rc = -ENOMEM;
        goto out;
    }
    s->org_id = org_id;
    s->partition = partition;
    memcpy(s->hash, topic_hash, 16);
    s->name_len = (uint16_t)name_len;
    memcpy(s->name, name, name_len);
    uint8_t buf[64 + MAX_NAME];
    size_t len = fmt_cat_define(buf, wal->crc_seed, s);
    if ((rc = cat_append(wal, buf, len))) {
        wal->chunks[s->no / STREAM_CHUNK][s->no % STREAM_CHUNK] = NULL;
        stream_free(s);
        goto out;
    }
    *stream_no = s->no;
    atomic_fetch_add(&wal->n_streams, 1);
out:
    pthread_mutex_unlock(&wal->lock);
    return rc;
}

int walfs_stream_count(walfs_t *wal)
{
    return (int)atomic_load(&wal->n_streams);
}

int64_t walfs_stream_next_byte(walfs_t *wal, uint32_t stream_no)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    pthread_mutex_lock(&s->lock);
    uint64_t next = s->next_byte;
    pthread_mutex_unlock(&s->lock);
    return (int64_t)next;
}

int walfs_stream_info(walfs_t *wal, uint32_t stream_no, walfs_stream_info_t *out)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    memset(out, 0, sizeof(*out));
    out->stream_no = s->no;
    out->partition = s->partition;
    out->org_id = s->org_id;
    memcpy(out->topic_hash, s->hash, 16);
    out->name_len = s->name_len;
    memcpy(out->name, s->name, s->name_len);
    out->deleted = (uint32_t)s->deleted;
    pthread_mutex_lock(&s->lock);
    GUARD_BEGIN(&s->lock, return -EIO);
    out->low_offset = s->low_offset;
    out->next_offset = s->next_offset;
    out->next_byte = s->next_byte;
    out->first_offset = s->n_blocks ? s->blocks[0]->first_offset : s->next_offset;
    out->low_byte = stream_low_byte(s);
    out->first_gid = UINT64_MAX;
    uint64_t at = s->low_offset > out->first_offset ? s->low_offset : out->first_offset;
    if (at < s->next_offset && s->n_blocks) {
        const block_t *b = s->blocks[find_block_by_offset(s, at)];
        if (at >= b->first_offset && at - b->first_offset < b->count) {
            slot_t sl;
            slot_get(b, at - b->first_offset, &sl);
            out->first_gid = b->first_gid + sl.gid_delta;
        }
    }
    GUARD_END();
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int walfs_debug_power_cut(walfs_t *wal, uint64_t seed, uint32_t keep_permille)
{
    if (!wal->opt.test_mode) return -EINVAL;
    sync_shutdown(wal);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < wal->n_segs; i++) {
        segment_t *seg = wal->segs[i];
        for (size_t k = 0; k < seg->n_saves; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (x % 1000 < keep_permille) continue;
            if (pwrite(seg->fd, seg->saves[k].data, 4096, (off_t)(seg->saves[k].page * 4096)) != 4096)
                wal_log(wal, "power cut: could not restore a page");
        }
    }
    wal_free(wal);
    return 0;
}
