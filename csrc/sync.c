/* sync.c: durability. Group commit: an appender that needs durability either finds its
 * ticket already durable, waits for the sync in flight, or leads the next one, which
 * fsyncs every dirty segment at once through io_uring. A failed fsync is final: it is
 * reported to every waiter and the WAL refuses appends until reopened, because the
 * kernel may already have dropped the dirty pages that failed to reach the disk. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t take_ticket(walfs_t *wal)
{
    return atomic_fetch_add(&wal->ticket, 1) + 1;
}

void seal_later(walfs_t *wal, block_t *b, uint64_t ticket)
{
    pthread_mutex_lock(&wal->seal_lock);
    if (wal->n_seals == wal->cap_seals) {
        size_t cap = wal->cap_seals ? wal->cap_seals * 2 : 16;
        pending_seal_t *n = realloc(wal->seals, cap * sizeof(*n));
        if (!n) {
            /* The run stays unsealed: recovery verifies it instead of trusting it. */
            pthread_mutex_unlock(&wal->seal_lock);
            return;
        }
        wal->seals = n;
        wal->cap_seals = cap;
    }
    wal->seals[wal->n_seals++] = (pending_seal_t){b, ticket};
    pthread_mutex_unlock(&wal->seal_lock);
}

/* Seals every full run whose data the sync that covered `durable` made durable. */
static void write_seals(walfs_t *wal, uint64_t durable)
{
    pthread_mutex_lock(&wal->seal_lock);
    size_t keep = 0;
    for (size_t i = 0; i < wal->n_seals; i++) {
        pending_seal_t p = wal->seals[i];
        if (p.ticket > durable) {
            wal->seals[keep++] = p;
            continue;
        }
        uint8_t hdr[BLK_HDR_SIZE];
        if (p.block->n_quar) {
            /* It holds quarantined records (recovery.c): never sealed, so that every open
             * verifies it and finds them again; its frontier covers it whole instead. */
            fmt_blk_frontier(hdr, wal, p.block, p.block->count, p.block->data_end);
            if (seg_pwrite(wal, p.block->seg, hdr, sizeof(hdr), p.block->file_off + BLK_FRONTIER_OFF) == 0)
                p.block->frontier_count = p.block->count;
            continue;
        }
        fmt_blk_seal(hdr, wal, p.block);
        if (seg_pwrite(wal, p.block->seg, hdr, sizeof(hdr), p.block->file_off + BLK_SEAL_OFF) == 0)
            p.block->sealed = 1;
    }
    wal->n_seals = keep;
    pthread_mutex_unlock(&wal->seal_lock);
}

static int fsync_ring(walfs_t *wal, segment_t **segs, size_t n)
{
    int first_err = 0;
    size_t done = 0;
    while (done < n) {
        size_t batch = 0;
        struct io_uring_sqe *sqe;
        while (done + batch < n && (sqe = io_uring_get_sqe(&wal->ring))) {
            io_uring_prep_fsync(sqe, segs[done + batch]->fd, IORING_FSYNC_DATASYNC);
            sqe->user_data = done + batch;
            batch++;
        }
        int rc = io_uring_submit_and_wait(&wal->ring, (unsigned)batch);
        if (rc < 0) return rc;
        for (size_t i = 0; i < batch; i++) {
            struct io_uring_cqe *cqe;
            rc = io_uring_wait_cqe(&wal->ring, &cqe);
            if (rc < 0) return rc;
            if (cqe->res < 0 && !first_err) first_err = cqe->res;
            io_uring_cqe_seen(&wal->ring, cqe);
        }
        done += batch;
    }
    return first_err;
}

static int fsync_segments(walfs_t *wal, segment_t **segs, size_t n)
{
    if (n == 0) return 0;
    int rc = fault_hit(wal, WALFS_FAULT_SYNC);
    if (rc) return rc;
    uint32_t slow = atomic_exchange(&wal->slow_sync_ms, 0); /* walfs_debug_slow_sync */
    if (slow) usleep((useconds_t)slow * 1000);
    /* One file gains nothing from the ring (the kernel punts the fsync to a worker
     * thread anyway, and the round trip was measured slower): call it directly. */
    if (wal->have_ring && n > 1) return fsync_ring(wal, segs, n);
    for (size_t i = 0; i < n; i++)
        if (fdatasync(segs[i]->fd) != 0) return -errno;
    return 0;
}

/* What recovery kept is on disk (it syncs its own repairs before appends start). */
void durable_init(walfs_t *wal)
{
    size_t n = atomic_load(&wal->n_streams);
    for (size_t i = 0; i < n; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        if (!s) continue;
        pthread_mutex_lock(&s->lock);
        s->durable_offset = s->next_offset;
        s->durable_byte = s->next_byte;
        pthread_mutex_unlock(&s->lock);
    }
}

/* Durable watermarks. Every stream's published end is noted BEFORE the sync reads its
 * ticket target: an append publishes after it takes its ticket, and marks its segment
 * dirty before that, so everything published by then is covered by this sync. After the
 * fsync succeeds the noted ends become the durable ones. */
typedef struct stream_end {
    uint64_t offset, byte;
} stream_end_t;

static stream_end_t *note_stream_ends(walfs_t *wal, size_t *n_out)
{
    size_t n = atomic_load(&wal->n_streams);
    stream_end_t *ends = malloc((n ? n : 1) * sizeof(*ends));
    if (!ends) {
        *n_out = 0;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        pthread_mutex_lock(&s->lock);
        ends[i] = (stream_end_t){s->next_offset, s->next_byte};
        pthread_mutex_unlock(&s->lock);
    }
    *n_out = n;
    return ends;
}

static void publish_durable(walfs_t *wal, const stream_end_t *ends, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        pthread_mutex_lock(&s->lock);
        if (ends[i].offset > s->durable_offset) {
            s->durable_offset = ends[i].offset;
            s->durable_byte = ends[i].byte;
        }
        pthread_mutex_unlock(&s->lock);
    }
}

int walfs_stream_marks(walfs_t *wal, uint32_t stream_no, walfs_marks_t *out)
{
    stream_t *s = stream_get(wal, stream_no);
    if (!s) return -ENOENT;
    int ro = wal->opt.read_only;
    pthread_mutex_lock(&s->lock);
    out->low_offset = s->low_offset;
    out->next_offset = s->next_offset;
    out->next_byte = s->next_byte;
    out->durable_offset = ro ? s->next_offset : s->durable_offset;
    out->durable_byte = ro ? s->next_byte : s->durable_byte;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* Milliseconds on the monotonic clock: the interval syncer's schedule must not move with
 * the wall clock (a step back would postpone its rounds). */
static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* walfs_disk_stats's buckets: below etcd's (1 ms * 2^k up to 8.192 s, which operators'
 * alerts are written against), three more, because a local SSD's fdatasync takes ~0.1 ms. */
static const uint64_t FSYNC_LE_NS[WALFS_FSYNC_BUCKETS] = {
    100000ull,     250000ull,     500000ull,     1000000ull,    2000000ull,    4000000ull,
    8000000ull,    16000000ull,   32000000ull,   64000000ull,   128000000ull,  256000000ull,
    512000000ull,  1024000000ull, 2048000000ull, 4096000000ull, 8192000000ull,
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* One round's time into the histogram (by the round's leader; readers may run at once). */
static void fsync_observe(walfs_t *wal, uint64_t ns)
{
    size_t i = 0;
    while (i < WALFS_FSYNC_BUCKETS && ns > FSYNC_LE_NS[i]) i++;
    atomic_fetch_add_explicit(&wal->fsync_counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&wal->fsync_sum_ns, ns, memory_order_relaxed);
}

int walfs_disk_stats(walfs_t *wal, walfs_disk_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out->fsync_le_ns, FSYNC_LE_NS, sizeof(FSYNC_LE_NS));
    for (size_t i = 0; i <= WALFS_FSYNC_BUCKETS; i++)
        out->fsync_counts[i] = atomic_load_explicit(&wal->fsync_counts[i], memory_order_relaxed);
    out->fsync_sum_ns = atomic_load_explicit(&wal->fsync_sum_ns, memory_order_relaxed);
    size_t n = atomic_load(&wal->n_streams);
    for (size_t i = 0; i < n; i++) {
        stream_t *s = stream_get(wal, (uint32_t)i);
        if (!s) continue;
        pthread_mutex_lock(&s->lock);
        out->write_bytes += s->written_bytes;
        pthread_mutex_unlock(&s->lock);
    }
    return 0;
}

/* Called with sync_lock held and no sync running; returns with sync_lock held. */
static int lead_sync(walfs_t *wal)
{
    wal->sync_running = 1;
    wal->last_round_ms = mono_ms();
    pthread_mutex_unlock(&wal->sync_lock);
    /* Stream locks are taken outside sync_lock (a leaf). A failed malloc only means this
     * round raises no durable watermark; the next one will. */
    size_t n_ends;
    stream_end_t *ends = note_stream_ends(wal, &n_ends);
    uint64_t target = atomic_load(&wal->ticket);
    frontier_t *frontier = frontier_snapshot(wal); /* before the dirty flags (frontier.c) */

    /* Read the ticket before taking the dirty flags: an append marks its segment dirty
     * before it takes its ticket, so every ticket <= target is covered. */
    pthread_mutex_lock(&wal->lock);
    size_t n = 0;
    segment_t **segs = malloc((wal->n_segs + 1) * sizeof(*segs));
    size_t *saves = malloc((wal->n_segs + 1) * sizeof(*saves));
    int rc = segs && saves ? 0 : -ENOMEM;
    for (size_t i = 0; !rc && i < wal->n_segs; i++) {
        segment_t *seg = wal->segs[i];
        if (!atomic_exchange(&seg->dirty, 0)) continue;
        pthread_mutex_lock(&seg->saves_lock);
        saves[n] = seg->n_saves;
        pthread_mutex_unlock(&seg->saves_lock);
        segs[n++] = seg;
    }
    pthread_mutex_unlock(&wal->lock);
    if (!rc && n) {
        uint64_t t0 = mono_ns();
        rc = fsync_segments(wal, segs, n);
        fsync_observe(wal, mono_ns() - t0);
    }
    /* A writeback that failed (writeback.c) marked its segment dirty: this round fails
     * with its error, whatever the fsync said. */
    for (size_t i = 0; i < n; i++) {
        int wb = atomic_exchange(&segs[i]->wb_err, 0);
        if (wb && !rc) rc = wb;
    }
    if (n) atomic_fetch_add(&wal->syncs, 1);
    if (!rc) {
        for (size_t i = 0; i < n; i++) seg_synced(wal, segs[i], saves[i]);
        if (ends) publish_durable(wal, ends, n_ends);
        write_seals(wal, target);
        frontier_record(wal, frontier);
        /* Durable-end marks in the catalog (catalog.c), rate-limited: one catalog write
         * and fdatasync per MARK_INTERVAL_MS at most, in the round's leader. */
        if (!wal->opt.read_only && wal->cat_version >= 2 && now_ms() - wal->last_mark_ms >= MARK_INTERVAL_MS) {
            wal->last_mark_ms = now_ms();
            cat_mark_ends(wal);
        }
    } else {
        wal_log(wal, "fsync failed (%s): refusing appends until reopened", strerror(-rc));
    }
    frontier_free(frontier);
    free(segs);
    free(saves);
    free(ends);

    pthread_mutex_lock(&wal->sync_lock);
    wal->sync_running = 0;
    if (rc)
        atomic_store(&wal->failed, rc == -ENOMEM ? -ENOMEM : -EIO);
    else if (target > wal->durable_ticket)
        wal->durable_ticket = target;
    pthread_cond_broadcast(&wal->sync_cond);
    return rc;
}

int wait_durable(walfs_t *wal, uint64_t ticket)
{
    int rc;
    pthread_mutex_lock(&wal->sync_lock);
    for (;;) {
        if ((rc = atomic_load(&wal->failed))) break;
        if (wal->durable_ticket >= ticket) break;
        if (!wal->sync_running)
            lead_sync(wal);
        else
            pthread_cond_wait(&wal->sync_cond, &wal->sync_lock);
    }
    pthread_mutex_unlock(&wal->sync_lock);
    return rc;
}

/* A sync even when no ticket is waiting (seals, recovery's zeroing, close). */
int sync_force(walfs_t *wal)
{
    pthread_mutex_lock(&wal->sync_lock);
    while (wal->sync_running) pthread_cond_wait(&wal->sync_cond, &wal->sync_lock);
    int rc = atomic_load(&wal->failed);
    if (!rc) rc = lead_sync(wal);
    pthread_mutex_unlock(&wal->sync_lock);
    return rc;
}

int exclusive_begin(walfs_t *wal)
{
    pthread_mutex_lock(&wal->sync_lock);
    while (wal->sync_running) pthread_cond_wait(&wal->sync_cond, &wal->sync_lock);
    wal->sync_running = 1;
    pthread_mutex_unlock(&wal->sync_lock);
    return 0;
}

void exclusive_end(walfs_t *wal)
{
    pthread_mutex_lock(&wal->sync_lock);
    wal->sync_running = 0;
    pthread_cond_broadcast(&wal->sync_cond);
    pthread_mutex_unlock(&wal->sync_lock);
}

static int any_dirty(walfs_t *wal)
{
    int dirty = 0;
    pthread_mutex_lock(&wal->lock);
    for (size_t i = 0; i < wal->n_segs && !dirty; i++) dirty = atomic_load(&wal->segs[i]->dirty);
    pthread_mutex_unlock(&wal->lock);
    return dirty;
}

/* Waits on cond (with sync_lock held) for up to ms milliseconds. */
static void syncer_wait(walfs_t *wal, pthread_cond_t *cond, int64_t ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)ms * 1000000ull;
    until.tv_sec += (time_t)(ns / 1000000000ull);
    until.tv_nsec = (long)(ns % 1000000000ull);
    pthread_cond_timedwait(cond, &wal->sync_lock, &until);
}

/* fsync="interval": a round is due one interval after the last round started, whoever led
 * it (this thread, sync(), an fsync="always" append, the Kafka listener's rounds through
 * sync()). A round that ran meanwhile already bounds how long an append stays unsynced
 * (it is covered by the first round that starts after it, at most one interval after the
 * round before), so the syncer adds no fsync beside callers that sync often: such a
 * round only made the next caller's sync wait for it and then run its own. */
static void *syncer_main(void *arg)
{
    walfs_t *wal = arg;
    int64_t interval = (int64_t)wal->opt.fsync_interval_ms;
    int64_t idle_until = 0; /* nothing was dirty: look again then */
    pthread_mutex_lock(&wal->sync_lock);
    wal->last_round_ms = mono_ms();
    while (!wal->syncer_stop) {
        int64_t due = wal->last_round_ms + interval;
        if (due < idle_until) due = idle_until;
        int64_t wait = due - mono_ms();
        if (wait <= 0 && wal->sync_running) {
            /* Due while another caller's round runs (a slow disk): start the next one as
             * soon as that one ends (sync_cond), not one interval from now. */
            syncer_wait(wal, &wal->sync_cond, interval);
            continue;
        }
        if (wait > 0 || atomic_load(&wal->failed)) {
            syncer_wait(wal, &wal->syncer_cond, wait > 0 ? wait : interval);
            continue;
        }
        pthread_mutex_unlock(&wal->sync_lock);
        int dirty = any_dirty(wal);
        pthread_mutex_lock(&wal->sync_lock);
        if (wal->syncer_stop) break;
        if (dirty && !wal->sync_running)
            lead_sync(wal);
        else
            idle_until = mono_ms() + interval;
    }
    pthread_mutex_unlock(&wal->sync_lock);
    return NULL;
}

int sync_init(walfs_t *wal)
{
    if (wal->opt.read_only) return 0;
    if (!wal->opt.no_io_uring) {
        int rc = io_uring_queue_init(64, &wal->ring, 0);
        if (rc == 0)
            wal->have_ring = 1;
        else
            wal_log(wal, "io_uring unavailable (%s): syncing with fdatasync", strerror(-rc));
    }
    if (wb_start(wal)) return -EAGAIN;
    if (wal->opt.fsync_mode == WALFS_FSYNC_INTERVAL) {
        if (pthread_create(&wal->syncer, NULL, syncer_main, wal) != 0) return -EAGAIN;
        wal->syncer_started = 1;
    }
    return 0;
}

void sync_shutdown(walfs_t *wal)
{
    wb_stop(wal);
    if (wal->syncer_started) {
        pthread_mutex_lock(&wal->sync_lock);
        wal->syncer_stop = 1;
        pthread_cond_signal(&wal->syncer_cond);
        pthread_mutex_unlock(&wal->sync_lock);
        pthread_join(wal->syncer, NULL);
        wal->syncer_started = 0;
    }
    if (wal->have_ring) {
        io_uring_queue_exit(&wal->ring);
        wal->have_ring = 0;
    }
}

int walfs_wait_durable(walfs_t *wal, uint64_t ticket)
{
    if (wal->opt.read_only) return -EROFS;
    return wait_durable(wal, ticket);
}

int walfs_sync(walfs_t *wal)
{
    if (wal->opt.read_only) return 0;
    return wait_durable(wal, atomic_load(&wal->ticket));
}
