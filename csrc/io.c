/* io.c: the only place that writes segment files. It injects faults and, in test mode,
 * remembers each page's content as of its file's last successful sync so that
 * walfs_debug_power_cut can put it back (power loss), page by page. */
#include "internal.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <stdarg.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The core's messages: to the callback Python registered (walfs_set_log: the logging
 * module, and so the journal under systemd), else to stderr. */
static _Atomic(walfs_log_fn) log_fn;

void walfs_set_log(walfs_log_fn fn) { atomic_store(&log_fn, fn); }

static void emit(int level, const char *dir, const char *line)
{
    walfs_log_fn fn = atomic_load(&log_fn);
    if (fn)
        fn(level, dir, line);
    else
        fprintf(stderr, "walfs[%s]: %s\n", dir, line);
}

/* The one formatting path of the three levels below. */
#define FORMAT_LINE(line, fmt)                   \
    char line[1024];                             \
    do {                                         \
        va_list ap_;                             \
        va_start(ap_, fmt);                      \
        vsnprintf(line, sizeof(line), fmt, ap_); \
        va_end(ap_);                             \
    } while (0)

void wal_log(const walfs_t *wal, const char *fmt, ...)
{
    FORMAT_LINE(line, fmt);
    emit(WALFS_LOG_WARNING, wal->dir, line);
}

void wal_info(const walfs_t *wal, const char *fmt, ...)
{
    FORMAT_LINE(line, fmt);
    emit(WALFS_LOG_INFO, wal->dir, line);
}

void wal_error(const walfs_t *wal, const char *fmt, ...)
{
    FORMAT_LINE(line, fmt);
    emit(WALFS_LOG_ERROR, wal->dir, line);
}

void wal_damage(walfs_t *wal, const char *fmt, ...)
{
    FORMAT_LINE(line, fmt);
    emit(WALFS_LOG_ERROR, wal->dir, line);
    if (!wal->damage[0]) snprintf(wal->damage, sizeof(wal->damage), "%s", line);
}

/* Returns the injected negative errno, or 0 to go ahead. */
int fault_hit(walfs_t *wal, int op)
{
    fault_t *f = &wal->faults[op];
    if (atomic_load(&f->err) == 0) return 0;
    if (atomic_fetch_sub(&f->after, 1) > 0) return 0;
    long long c = atomic_load(&f->count);
    if (c == 0) return 0;
    if (c > 0) atomic_fetch_sub(&f->count, 1);
    return -atomic_load(&f->err);
}

static int saved(const segment_t *seg, uint64_t page)
{
    for (size_t i = 0; i < seg->n_saves; i++)
        if (seg->saves[i].page == page) return 1;
    return 0;
}

/* Test mode: keep the synced content of every page [off, off+len) touches. */
static int remember(walfs_t *wal, segment_t *seg, uint64_t off, uint64_t len)
{
    if (!wal->opt.test_mode || len == 0) return 0;
    pthread_mutex_lock(&seg->saves_lock);
    for (uint64_t p = off / PAGE; p <= (off + len - 1) / PAGE; p++) {
        if (saved(seg, p)) continue;
        if (seg->n_saves == seg->cap_saves) {
            size_t cap = seg->cap_saves ? seg->cap_saves * 2 : 64;
            page_save_t *n = realloc(seg->saves, cap * sizeof(*n));
            if (!n) goto oom;
            seg->saves = n;
            seg->cap_saves = cap;
        }
        uint8_t *data = malloc(PAGE);
        if (!data) goto oom;
        if (pread(seg->fd, data, PAGE, (off_t)(p * PAGE)) != (ssize_t)PAGE) memset(data, 0, PAGE);
        seg->saves[seg->n_saves++] = (page_save_t){p, data};
    }
    pthread_mutex_unlock(&seg->saves_lock);
    return 0;
oom:
    pthread_mutex_unlock(&seg->saves_lock);
    return -ENOMEM;
}

void seg_synced(walfs_t *wal, segment_t *seg, size_t n_before)
{
    if (!wal->opt.test_mode) return;
    pthread_mutex_lock(&seg->saves_lock);
    for (size_t i = 0; i < n_before && i < seg->n_saves; i++) free(seg->saves[i].data);
    if (n_before > seg->n_saves) n_before = seg->n_saves;
    memmove(seg->saves, seg->saves + n_before, (seg->n_saves - n_before) * sizeof(page_save_t));
    seg->n_saves -= n_before;
    pthread_mutex_unlock(&seg->saves_lock);
}

void saves_free(segment_t *seg)
{
    for (size_t i = 0; i < seg->n_saves; i++) free(seg->saves[i].data);
    free(seg->saves);
    seg->saves = NULL;
    seg->n_saves = seg->cap_saves = 0;
}

int seg_pwritev(walfs_t *wal, segment_t *seg, const struct iovec *iov, int cnt, uint64_t off)
{
    uint64_t total = 0;
    for (int i = 0; i < cnt; i++) total += iov[i].iov_len;
    int rc = fault_hit(wal, WALFS_FAULT_WRITE);
    if (rc) return rc;
    if ((rc = remember(wal, seg, off, total))) return rc;
    atomic_store(&seg->dirty, 1);
    for (;;) {
        ssize_t n = pwritev(seg->fd, iov, cnt, (off_t)off);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if ((uint64_t)n == total) break;
        /* Short write: advance through the vector and go on. */
        off += (uint64_t)n;
        total -= (uint64_t)n;
        struct iovec rest[IOV_MAX];
        int k = 0;
        size_t skip = (size_t)n;
        for (int i = 0; i < cnt; i++) {
            if (skip >= iov[i].iov_len) {
                skip -= iov[i].iov_len;
                continue;
            }
            rest[k].iov_base = (uint8_t *)iov[i].iov_base + skip;
            rest[k].iov_len = iov[i].iov_len - skip;
            skip = 0;
            k++;
        }
        return seg_pwritev(wal, seg, rest, k, off);
    }
    return 0;
}

/* Small appends (writer.c) copy into the segment's shared writable mapping instead of
 * calling pwritev: the same page cache, so every reader (this process's read-only
 * mapping, pread, other processes) sees exactly what a pwritev would have shown, and the
 * fsyncs of sync.c make it durable the same way (fdatasync writes back pages dirtied
 * through a mapping too); but no syscall. Faults and test-mode page saves are the same as
 * seg_pwritev's. The file is fallocated whole and never shortened while open, so a write
 * fault can only come from a disk error reading the page in or the file system failing
 * to make it writable: SIGBUS, which the guard turns into -EIO (the caller undoes the
 * append). The guard skips saving the signal mask (a syscall); on a fault the handler
 * has left SIGBUS blocked, and it is unblocked here. */
int seg_mwritev(walfs_t *wal, segment_t *seg, const struct iovec *iov, int cnt, uint64_t off)
{
    uint64_t total = 0;
    for (int i = 0; i < cnt; i++) total += iov[i].iov_len;
    if (off > seg->size || total > seg->size - off) return -EINVAL;
    int rc = fault_hit(wal, WALFS_FAULT_WRITE);
    if (rc) return rc;
    if ((rc = remember(wal, seg, off, total))) return rc;
    atomic_store(&seg->dirty, 1);
    guard_t g;
    guard_t *const prev = guard_get();
    if (sigsetjmp(g.jb, 0)) {
        guard_set(prev);
        sigset_t bus;
        sigemptyset(&bus);
        sigaddset(&bus, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
        return -EIO;
    }
    guard_set(&g);
    uint8_t *dst = seg->wmap + off;
    for (int i = 0; i < cnt; i++) {
        memcpy(dst, iov[i].iov_base, iov[i].iov_len);
        dst += iov[i].iov_len;
    }
    guard_set(prev);
    return 0;
}

int seg_pwrite(walfs_t *wal, segment_t *seg, const void *buf, size_t len, uint64_t off)
{
    struct iovec v = {(void *)buf, len};
    return seg_pwritev(wal, seg, &v, 1, off);
}

int seg_zero(walfs_t *wal, segment_t *seg, uint64_t off, uint64_t len)
{
    if (len == 0) return 0;
    if (!wal->opt.test_mode) {
        atomic_store(&seg->dirty, 1);
        if (fallocate(seg->fd, FALLOC_FL_ZERO_RANGE, (off_t)off, (off_t)len) == 0) return 0;
        if (fallocate(seg->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) == 0) {
            /* Take the space back so that later appends cannot meet ENOSPC. */
            if (fallocate(seg->fd, 0, (off_t)off, (off_t)len) != 0)
                wal_log(wal, "could not re-reserve %llu bytes: %s", (unsigned long long)len, strerror(errno));
            return 0;
        }
    }
    static const uint8_t zeros[65536];
    while (len > 0) {
        size_t n = len < sizeof(zeros) ? (size_t)len : sizeof(zeros);
        int rc = seg_pwrite(wal, seg, zeros, n, off);
        if (rc) return rc;
        off += n;
        len -= n;
    }
    return 0;
}

int fsync_dir(int dirfd)
{
    return fsync(dirfd) == 0 ? 0 : -errno;
}

int walfs_debug_fail(walfs_t *wal, int op, int err, int64_t after, int64_t count)
{
    if (op < WALFS_FAULT_WRITE || op > WALFS_FAULT_CAT_SPLIT || err < 0) return -EINVAL;
    fault_t *f = &wal->faults[op];
    atomic_store(&f->err, 0);
    atomic_store(&f->after, after);
    atomic_store(&f->count, count);
    atomic_store(&f->err, err);
    return 0;
}

int walfs_debug_slow_sync(walfs_t *wal, uint32_t ms)
{
    atomic_store(&wal->slow_sync_ms, ms);
    return 0;
}
