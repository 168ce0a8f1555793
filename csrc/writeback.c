/* writeback.c: starts the writeback of what appends wrote, off the appending thread.
 *
 * The writer (writer.c writeback_run) hands over a range of a segment file once a run is
 * full or WRITEBACK_MIN bytes of records are waiting in it; this file's thread calls
 * sync_file_range(SYNC_FILE_RANGE_WRITE) on it, so that the fsync which makes the bytes
 * durable later (sync.c: a sync round, a consumer's first read under fsync="never",
 * close) finds most of them on the disk already. It promises nothing: what is durable is
 * still what an fsync covered, and test mode's power-loss emulation
 * (walfs_debug_power_cut) treats these pages as unsynced.
 *
 * Why a thread of our own and not the appender: sync_file_range(WRITE) blocks once the
 * disk's queue is full (measured: 94-343 ms during a large fsync), and Kafka produce
 * appends run on the listener's event loop. Handing a range over costs the appender a
 * short mutex (held here only to take or drop queue entries, never across a syscall),
 * and a condition signal only when the thread sleeps idle (WB_LINGER_MS). Why not IORING_OP_SYNC_FILE_RANGE on an io_uring:
 * the kernel runs it in an io-wq worker anyway (it always needs a blocking context); a
 * ring's file is looked up when the worker runs the request, so a segment's fd could not
 * be closed (reclamation) without reaping its completions under a lock appenders need;
 * and a ring is not always there (no_io_uring, containers whose seccomp profile refuses
 * io_uring), where this thread still works.
 *
 * Errors: SYNC_FILE_RANGE_WRITE alone (never WAIT_AFTER) does not consume the file's
 * writeback error, so the kernel still reports it to the next fdatasync. On top of that a
 * failed writeback is logged, and the segment is marked dirty with the error kept
 * (seg->wb_err): the next sync round fsyncs it and fails with that error, and the WAL
 * refuses appends until reopened, as for a failed fsync (sync.c). Never dropped.
 *
 * Lifetime: the thread starts with the WAL's sync machinery (sync_init) and stops in
 * sync_shutdown (close, a failed open, a simulated power cut), before any segment fd is
 * closed; queued ranges are dropped then (the close's own fsync covers them) and the one
 * in flight is waited for. Reclamation calls wb_forget before it closes a segment. */
#include "internal.h"

#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <time.h>

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* While ranges keep coming, the thread looks for the next one every WB_POLL_MS, for
 * WB_LINGER_MS after its last: a steady producer's hand-overs then make no syscall at all
 * (no wake-up). Idle longer, it sleeps until an appender wakes it (wb_waiting). */
#define WB_POLL_MS 5
#define WB_LINGER_MS 1000

static void *wb_main(void *arg)
{
    walfs_t *wal = arg;
    /* SCHED_BATCH: when an appender wakes it, this thread does not preempt the appender
     * (measured on the loaded 2-core machine: a wake-up cost the appender 1-23 ms of
     * waiting for the CPU under SCHED_OTHER). Best effort. */
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &(struct sched_param){0});
    uint64_t linger_until = mono_ns() + WB_LINGER_MS * 1000000ull; /* an open is followed by appends */
    pthread_mutex_lock(&wal->wb_lock);
    for (;;) {
        while (!wal->wb_stop && wal->wb_n == 0) {
            uint64_t now = mono_ns();
            if (now < linger_until) {
                uint64_t at = now + WB_POLL_MS * 1000000ull;
                struct timespec ts = {(time_t)(at / 1000000000ull), (long)(at % 1000000000ull)};
                pthread_cond_timedwait(&wal->wb_cond, &wal->wb_lock, &ts);
                continue;
            }
            wal->wb_waiting = 1;
            pthread_cond_wait(&wal->wb_cond, &wal->wb_lock);
            wal->wb_waiting = 0;
        }
        if (wal->wb_stop) break;
        wb_range_t r = wal->wb_q[wal->wb_head];
        wal->wb_head = (wal->wb_head + 1) % WB_QUEUE;
        wal->wb_n--;
        wal->wb_busy = r.seg; /* wb_forget waits while its segment is here */
        pthread_mutex_unlock(&wal->wb_lock);

        int rc = fault_hit(wal, WALFS_FAULT_WRITEBACK);
        if (!rc && sync_file_range(r.seg->fd, (off_t)r.off, (off_t)r.len, SYNC_FILE_RANGE_WRITE) != 0) rc = -errno;
        if (rc) {
            /* First the error, then the dirty flag: a sync round that takes the flag
             * finds the error (sync.c lead_sync). */
            int none = 0;
            atomic_compare_exchange_strong(&r.seg->wb_err, &none, rc);
            atomic_store(&r.seg->dirty, 1);
            wal_log(wal, "writeback of segment %llu bytes %llu-%llu failed (%s): the next sync fails with it",
                    (unsigned long long)r.seg->id, (unsigned long long)r.off, (unsigned long long)(r.off + r.len),
                    strerror(-rc));
        }

        pthread_mutex_lock(&wal->wb_lock);
        linger_until = mono_ns() + WB_LINGER_MS * 1000000ull;
        wal->wb_busy = NULL;
        wal->wb_stats.done++;
        if (rc) wal->wb_stats.failed++;
        pthread_cond_broadcast(&wal->wb_idle_cond);
    }
    pthread_mutex_unlock(&wal->wb_lock);
    return NULL;
}

int wb_start(walfs_t *wal)
{
    pthread_mutex_init(&wal->wb_lock, NULL);
    pthread_condattr_t mono;
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC); /* the poll's timed wait (mono_ns) */
    pthread_cond_init(&wal->wb_cond, &mono);
    pthread_condattr_destroy(&mono);
    pthread_cond_init(&wal->wb_idle_cond, NULL);
    wal->wb_inited = 1;
    if (pthread_create(&wal->wb_thread, NULL, wb_main, wal) != 0) return -EAGAIN;
    wal->wb_started = 1;
    return 0;
}

void wb_stop(walfs_t *wal)
{
    if (!wal->wb_inited) return;
    if (wal->wb_started) {
        pthread_mutex_lock(&wal->wb_lock);
        wal->wb_stop = 1;
        wal->wb_n = 0; /* queued ranges: the close's fsync covers them, a power cut drops them */
        pthread_cond_signal(&wal->wb_cond);
        pthread_mutex_unlock(&wal->wb_lock);
        pthread_join(wal->wb_thread, NULL); /* the range in flight ends first */
        wal->wb_started = 0;
    }
    pthread_mutex_destroy(&wal->wb_lock);
    pthread_cond_destroy(&wal->wb_cond);
    pthread_cond_destroy(&wal->wb_idle_cond);
    wal->wb_inited = 0;
}

int wb_queue(walfs_t *wal, segment_t *seg, uint64_t off, uint64_t len, int nowait)
{
    if (!wal->wb_started || len == 0) return -EAGAIN;
    uint64_t t0 = mono_ns(); /* the appender's whole cost, lock and wake included (wb_stats.max_queue_ns) */
    if (!nowait) {
        pthread_mutex_lock(&wal->wb_lock);
    } else if (pthread_mutex_trylock(&wal->wb_lock) != 0) {
        __atomic_fetch_add(&wal->wb_stats.refused, 1, __ATOMIC_RELAXED); /* not under its lock: counted atomically */
        return -EAGAIN;
    }
    int rc = 0, wake = 0;
    wb_range_t *last = wal->wb_n ? &wal->wb_q[(wal->wb_head + wal->wb_n - 1) % WB_QUEUE] : NULL;
    if (last && last->seg == seg && last->off + last->len == off) {
        last->len += len; /* the same run's next bytes, not taken yet */
    } else if (wal->wb_n == WB_QUEUE) {
        rc = -EAGAIN; /* the disk is far behind: the caller offers it again later */
    } else {
        wal->wb_q[(wal->wb_head + wal->wb_n) % WB_QUEUE] = (wb_range_t){seg, off, len};
        wal->wb_n++;
        wake = wal->wb_waiting;
    }
    if (rc)
        __atomic_fetch_add(&wal->wb_stats.refused, 1, __ATOMIC_RELAXED);
    else
        wal->wb_stats.queued++;
    pthread_mutex_unlock(&wal->wb_lock);
    /* Only a thread waiting for work needs the wake (a busy one finds the range when it
     * comes back for the next), and it comes after the unlock, so the woken thread does
     * not block on the lock its waker still holds. */
    if (wake) pthread_cond_signal(&wal->wb_cond);
    uint64_t spent = mono_ns() - t0, max = __atomic_load_n(&wal->wb_stats.max_queue_ns, __ATOMIC_RELAXED);
    while (spent > max && !__atomic_compare_exchange_n(&wal->wb_stats.max_queue_ns, &max, spent, 0, __ATOMIC_RELAXED,
                                                        __ATOMIC_RELAXED)) {
    }
    return rc;
}

void wb_forget(walfs_t *wal, segment_t *seg)
{
    if (!wal->wb_started) return;
    pthread_mutex_lock(&wal->wb_lock);
    size_t keep = 0;
    for (size_t i = 0; i < wal->wb_n; i++) {
        wb_range_t r = wal->wb_q[(wal->wb_head + i) % WB_QUEUE];
        if (r.seg != seg) wal->wb_q[(wal->wb_head + keep++) % WB_QUEUE] = r;
    }
    wal->wb_n = keep;
    pthread_cond_broadcast(&wal->wb_idle_cond); /* walfs_debug_writeback_wait: maybe empty now */
    while (wal->wb_busy == seg) pthread_cond_wait(&wal->wb_idle_cond, &wal->wb_lock);
    pthread_mutex_unlock(&wal->wb_lock);
}

int walfs_debug_writeback_wait(walfs_t *wal, walfs_writeback_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!wal->wb_started) return wal->opt.read_only ? -EROFS : -ESRCH;
    pthread_mutex_lock(&wal->wb_lock);
    while (wal->wb_n || wal->wb_busy) pthread_cond_wait(&wal->wb_idle_cond, &wal->wb_lock);
    *out = wal->wb_stats;
    out->refused = __atomic_load_n(&wal->wb_stats.refused, __ATOMIC_RELAXED); /* these two change outside the lock */
    out->max_queue_ns = __atomic_load_n(&wal->wb_stats.max_queue_ns, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&wal->wb_lock);
    return 0;
}
