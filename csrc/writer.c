/* writer.c: the append path. An append plans where every record goes (allocating runs),
 * writes records and index slots with few syscalls (a small append with none: it copies
 * into the segment's writable mapping, io.c seg_mwritev), and only then publishes them: a
 * failed append leaves nothing visible and nothing that recovery would bring back. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define STAGE_SIZE (256u << 10) /* bytes of small records copied before a pwritev */
#define SMALL_BODY 4096u        /* bodies up to this size are staged, larger ones are not */
#define IOV_SLOTS 1024          /* IOV_MAX */
/* A chunk of at most this many bytes (records and slots) is copied into the segment's
 * writable mapping (seg_mwritev) instead of written with pwritev: one record per call
 * then costs no syscall. Larger batches keep pwritev, which the kernel copies faster than
 * a first touch of each page through the mapping. */
#define MAPPED_MAX (16u << 10)
/* Once this many bytes of records wait in a run since its last writeback, or the run is
 * full, the append hands them to the writeback thread (writeback.c), under every fsync
 * policy, so that the fsync which makes them durable later (a sync round, a consumer's
 * first read under fsync="never", close) has less left to wait for: measured on a
 * 200 MiB append of 1 KiB records, the sync after it fell from ~0.15 s (all of it still
 * dirty) to what the disk had not yet taken, and under fsync="never" a consumer's first
 * fetch after a 320 MB backlog (docs/benchmarks.md). Less than this waits for the next
 * trigger or the sync (a writeback per small append would cost more than it saves). */
#define WRITEBACK_MIN (4u << 20)

/* Each appending thread's stage (STAGE_SIZE bytes), made at its first batch that needs
 * it and freed when the thread exits: a batch append does not allocate and free 256 KiB
 * per call (glibc then grows and trims its heap, page-faulting the stage in every
 * time). The key is the core's one piece of process-wide state besides the log callback
 * and the SIGBUS handler. */
static pthread_key_t stage_key;
static pthread_once_t stage_once = PTHREAD_ONCE_INIT;
static int stage_key_ok;

static void stage_key_make(void)
{
    stage_key_ok = pthread_key_create(&stage_key, free) == 0;
}

static uint8_t *thread_stage(int *owned)
{
    pthread_once(&stage_once, stage_key_make);
    uint8_t *p = stage_key_ok ? pthread_getspecific(stage_key) : NULL;
    if (p) return p;
    p = malloc(STAGE_SIZE);
    if (p && stage_key_ok && pthread_setspecific(stage_key, p) == 0) return p;
    *owned = p != NULL; /* no key: this call frees it */
    return p;
}

typedef struct chunk {
    block_t *b;
    int is_new;
    uint32_t first;        /* first record of the append in this run */
    uint32_t n;
    uint64_t data_start;   /* where the chunk's records start, relative to the run */
    uint64_t count_before; /* records in the run before the chunk */
    uint64_t bytes_before; /* view bytes in the run before the chunk */
    int data_written, slots_written;
} chunk_t;

/* Records with small bodies are copied, header and body, into a staging buffer so that
 * the kernel copies one contiguous range per pwritev (many 36-byte and 100-byte iovecs
 * were measured to cost more than the memcpy); large bodies are written from the
 * caller's memory. */
static int write_chunk(walfs_t *wal, const chunk_t *c, const uint8_t *const *bodies, const uint32_t *meta_lens,
                       const uint32_t *value_lens, uint64_t first_gid, int64_t ts, uint32_t n_total,
                       uint8_t *slots)
{
    block_t *b = c->b;
    int rc;
    uint64_t chunk_bytes = (uint64_t)c->n * (REC_HDR_SIZE + SLOT_SIZE);
    for (uint32_t j = 0; j < c->n && chunk_bytes <= MAPPED_MAX; j++)
        chunk_bytes += (uint64_t)meta_lens[c->first + j] + value_lens[c->first + j];
    int (*put)(walfs_t *, segment_t *, const struct iovec *, int, uint64_t) =
        chunk_bytes <= MAPPED_MAX && b->seg->wmap != MAP_FAILED ? seg_mwritev : seg_pwritev;
    if (c->is_new) {
        uint8_t hdr[BLK_HDR_SIZE];
        fmt_blk_open(hdr, wal, b);
        if ((rc = put(wal, b->seg, &(struct iovec){hdr, sizeof(hdr)}, 1, b->file_off))) return rc;
    }
    /* The stage holds what this chunk stages, up to STAGE_SIZE: one or two small records
     * stage on the stack, more in the thread's stage. */
    size_t stage_cap = 0;
    for (uint32_t j = 0; j < c->n && stage_cap < STAGE_SIZE; j++) {
        size_t body = (size_t)meta_lens[c->first + j] + value_lens[c->first + j];
        stage_cap += REC_HDR_SIZE + (body <= SMALL_BODY ? body : 0);
    }
    if (stage_cap > STAGE_SIZE) stage_cap = STAGE_SIZE;
    uint8_t stack_stage[2 * (REC_HDR_SIZE + SMALL_BODY)];
    int owned = 0;
    uint8_t *stage = stage_cap <= sizeof(stack_stage) ? stack_stage : thread_stage(&owned);
    if (!stage) return -ENOMEM;
    struct iovec iov[IOV_SLOTS];
    uint64_t pos = c->data_start, view = c->bytes_before, group_pos = pos;
    size_t used = 0;
    int k = 0;
    /* Staged records are sealed four at a time (one interleaved CRC pass). */
    uint8_t *pend[4];
    size_t pend_len[4];
    int np = 0;
    rc = 0;
    for (uint32_t j = 0; j < c->n && !rc; j++) {
        uint32_t i = c->first + j;
        uint64_t gid = first_gid + i;
        size_t body = (size_t)meta_lens[i] + value_lens[i];
        int small = body <= SMALL_BODY;
        size_t staged = REC_HDR_SIZE + (small ? body : 0);
        if (used + staged > stage_cap || k + 2 > IOV_SLOTS) {
            for (int q = 0; q < np; q++) fmt_rec_seal(pend[q], wal->crc_seed, pend[q] + REC_HDR_SIZE, pend_len[q]);
            np = 0;
            rc = put(wal, b->seg, iov, k, b->file_off + group_pos);
            group_pos = pos;
            used = 0;
            k = 0;
            if (rc) break;
        }
        uint8_t *h = stage + used;
        fmt_rec_header(h, value_lens[i], gid, ts, meta_lens[i], n_total - 1 - i, b->stream_no);
        if (small) {
            memcpy(h + REC_HDR_SIZE, bodies[i], body);
            pend[np] = h;
            pend_len[np++] = body;
            if (np == 4) {
                fmt_rec_seal_x4(pend, wal->crc_seed, pend_len);
                np = 0;
            }
        } else {
            fmt_rec_seal(h, wal->crc_seed, bodies[i], body);
        }
        if (k > 0 && (uint8_t *)iov[k - 1].iov_base + iov[k - 1].iov_len == h)
            iov[k - 1].iov_len += staged; /* contiguous with the previous staged bytes */
        else
            iov[k++] = (struct iovec){h, staged};
        if (!small) iov[k++] = (struct iovec){(void *)bodies[i], body};
        used += staged;
        fmt_slot(slots + (size_t)(c->n - 1 - j) * SLOT_SIZE, (uint32_t)pos, (uint32_t)(gid - b->first_gid),
                 (uint32_t)view);
        pos += REC_HDR_SIZE + body;
        view += value_lens[i] + 1u;
    }
    for (int q = 0; q < np && !rc; q++) fmt_rec_seal(pend[q], wal->crc_seed, pend[q] + REC_HDR_SIZE, pend_len[q]);
    if (!rc && k) rc = put(wal, b->seg, iov, k, b->file_off + group_pos);
    if (owned) free(stage);
    if (rc) return rc;
    uint64_t slot_off = b->run_size - (c->count_before + c->n) * SLOT_SIZE;
    return put(wal, b->seg, &(struct iovec){slots, (size_t)c->n * SLOT_SIZE}, 1, b->file_off + slot_off);
}

/* Hands what appends put into run b since its last writeback to the writeback thread
 * (writeback.c), once WRITEBACK_MIN bytes of records wait: those records and their index
 * slots, whole pages only (the last page of each is still being filled); once the run is
 * full, all the rest of it. What is not taken (a full queue; with nowait, its lock held)
 * stays for the next append to offer (a full run's too: each append offers the run before
 * its first). Under the stream's append_lock, after the records are published. */
static void writeback_run(walfs_t *wal, block_t *b, int nowait)
{
    const uint64_t page = 4096; /* run offsets are page-aligned in the file */
    uint64_t slots_end = b->run_size - b->wb_slots; /* slots handed over lie at or above it */
    if (b->full) {
        if (slots_end > b->wb_end &&
            wb_queue(wal, b->seg, b->file_off + b->wb_end, slots_end - b->wb_end, nowait) == 0) {
            b->wb_end = slots_end;
            b->wb_slots = b->run_size - slots_end;
        }
        return;
    }
    uint64_t end = b->data_end & ~(page - 1);
    if (end <= b->wb_end || end - b->wb_end < WRITEBACK_MIN) return;
    if (wb_queue(wal, b->seg, b->file_off + b->wb_end, end - b->wb_end, nowait)) return;
    b->wb_end = end;
    uint64_t slots = (b->count * SLOT_SIZE) & ~(page - 1); /* whole pages of slots, from the run's end */
    if (slots > b->wb_slots &&
        wb_queue(wal, b->seg, b->file_off + b->run_size - slots, slots - b->wb_slots, nowait) == 0)
        b->wb_slots = slots;
}

/* Puts back zeros where a failed append wrote, so that recovery can never resurrect it. */
static int undo_chunk(walfs_t *wal, const chunk_t *c, uint64_t data_end)
{
    block_t *b = c->b;
    int rc = 0;
    if (c->is_new) rc = seg_zero(wal, b->seg, b->file_off, BLK_HDR_SIZE);
    if (!rc) rc = seg_zero(wal, b->seg, b->file_off + c->data_start, data_end - c->data_start);
    uint64_t slot_off = b->run_size - (c->count_before + c->n) * SLOT_SIZE;
    if (!rc) rc = seg_zero(wal, b->seg, b->file_off + slot_off, (uint64_t)c->n * SLOT_SIZE);
    return rc;
}

/* The append path proper; bodies[i] points at record i's meta || value. */
static int append_bodies(walfs_t *wal, stream_t *s, uint32_t n, const uint8_t **bodies, const uint32_t *meta_lens,
                         const uint32_t *value_lens, int wait, int nowait, uint64_t *first_gid_out,
                         uint64_t *first_offset_out, uint64_t *ticket_out)
{
    uint32_t stream_no = s->no;
    int rc = 0;
    uint64_t max_body = (uint64_t)wal->blocks_per_seg * wal->opt.block_size - BLK_DATA_OFF - REC_HDR_SIZE - SLOT_SIZE;
    /* A small append (one record per call, say) plans and writes its slots on the stack:
     * no malloc or free per call. */
    chunk_t stack_chunks[4];
    uint8_t stack_slots[64 * SLOT_SIZE];
    chunk_t *chunks = stack_chunks;
    size_t n_chunks = 0, cap_chunks = sizeof(stack_chunks) / sizeof(stack_chunks[0]);
    uint8_t *slots = NULL;
    uint64_t view_total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if ((uint64_t)meta_lens[i] + value_lens[i] > max_body) {
            rc = -EMSGSIZE;
            goto out_free;
        }
        view_total += value_lens[i] + 1ull;
    }

    if (!nowait)
        pthread_mutex_lock(&s->append_lock);
    else if (pthread_mutex_trylock(&s->append_lock) != 0) {
        rc = -EAGAIN;
        goto out_free;
    }
    if ((rc = atomic_load(&wal->failed))) goto out_unlock;
    if (s->deleted) { /* deleted while this append waited for the lock */
        rc = -ENOENT;
        goto out_unlock;
    }

    pthread_mutex_lock(&wal->gid_lock);
    if (wal->next_gid + n > (wal->epoch + 1) << GID_EPOCH_SHIFT) {
        if (nowait) { /* a new epoch writes and syncs the catalog */
            pthread_mutex_unlock(&wal->gid_lock);
            rc = -EAGAIN;
            goto out_unlock;
        }
        pthread_mutex_lock(&wal->lock);
        rc = cat_new_epoch(wal);
        pthread_mutex_unlock(&wal->lock);
        if (rc) {
            pthread_mutex_unlock(&wal->gid_lock);
            goto out_unlock;
        }
    }
    uint64_t first_gid = wal->next_gid;
    wal->next_gid += n;
    pthread_mutex_unlock(&wal->gid_lock);

    pthread_mutex_lock(&s->lock);
    block_t *cur = s->n_blocks && !s->blocks[s->n_blocks - 1]->full ? s->blocks[s->n_blocks - 1] : NULL;
    const block_t *last = s->n_blocks ? s->blocks[s->n_blocks - 1] : NULL;
    uint64_t last_size = last ? run_growth_base(wal, last->run_size, last->data_end + last->count * SLOT_SIZE) : 0;
    uint64_t offset = s->next_offset, byte = s->next_byte;
    int64_t ts = now_ms();
    if (ts < s->last_ts) ts = s->last_ts;
    pthread_mutex_unlock(&s->lock);

    /* Plan: which run each record goes to. */
    uint64_t d_end = cur ? cur->data_end : 0, cnt = cur ? cur->count : 0, blen = cur ? cur->byte_len : 0;
    size_t max_slots = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t need = REC_HDR_SIZE + (uint64_t)meta_lens[i] + value_lens[i];
        int fits = cur && d_end + need + (cnt + 1) * SLOT_SIZE <= cur->run_size &&
                   first_gid + i - cur->first_gid <= UINT32_MAX;
        if (!fits) {
            block_t *b;
            /* The next size class after the stream's last run (allocator.c): after the
             * run this session filled, or what a run of an earlier session holds. */
            uint64_t base = cur ? run_growth_base(wal, cur->run_size, d_end + cnt * SLOT_SIZE) : last_size;
            uint64_t size = run_size_for(wal, base, need + SLOT_SIZE);
            if (!nowait) {
                pthread_mutex_lock(&wal->lock);
                rc = alloc_run(wal, stream_no, size, &b);
            } else if (pthread_mutex_trylock(&wal->lock) == 0) {
                rc = alloc_run_existing(wal, stream_no, size, &b);
            } else {
                rc = -EAGAIN; /* held, perhaps across a segment's creation */
                goto out_release;
            }
            pthread_mutex_unlock(&wal->lock);
            if (rc) goto out_release;
            b->first_offset = offset + i;
            b->first_byte = byte;
            b->first_gid = first_gid + i;
            cur = b;
            d_end = BLK_DATA_OFF;
            cnt = blen = 0;
        }
        if (!n_chunks || chunks[n_chunks - 1].b != cur) {
            if (n_chunks == cap_chunks) {
                cap_chunks *= 2;
                chunk_t *nc = chunks == stack_chunks ? malloc(cap_chunks * sizeof(*nc))
                                                     : realloc(chunks, cap_chunks * sizeof(*nc));
                if (nc && chunks == stack_chunks) memcpy(nc, stack_chunks, sizeof(stack_chunks));
                if (!nc) {
                    if (!fits) {
                        pthread_mutex_lock(&wal->lock);
                        release_run(wal, cur);
                        pthread_mutex_unlock(&wal->lock);
                    }
                    rc = -ENOMEM;
                    goto out_release;
                }
                chunks = nc;
            }
            chunks[n_chunks++] = (chunk_t){cur, !fits, i, 0, d_end, cnt, blen, 0, 0};
        }
        chunk_t *c = &chunks[n_chunks - 1];
        c->n++;
        if (c->n > max_slots) max_slots = c->n;
        d_end += need;
        cnt++;
        blen += value_lens[i] + 1ull;
        byte += value_lens[i] + 1ull;
    }

    slots = max_slots * SLOT_SIZE <= sizeof(stack_slots) ? stack_slots : malloc(max_slots * SLOT_SIZE);
    if (!slots) {
        rc = -ENOMEM;
        goto out_release;
    }
    size_t done;
    for (done = 0; done < n_chunks; done++) {
        rc = write_chunk(wal, &chunks[done], bodies, meta_lens, value_lens, first_gid, ts, n, slots);
        if (rc) break;
    }
    if (rc) {
        /* Undo every chunk that may have reached the file, the failed one included. */
        for (size_t i = 0; i <= done && i < n_chunks; i++) {
            const chunk_t *c = &chunks[i];
            uint64_t end = c->data_start;
            for (uint32_t j = 0; j < c->n; j++)
                end += REC_HDR_SIZE + (uint64_t)meta_lens[c->first + j] + value_lens[c->first + j];
            int urc = undo_chunk(wal, c, end);
            if (urc) {
                /* Unknown bytes may stay on disk: refuse appends until a reopen recovers. */
                wal_log(wal, "could not undo a failed append (%d): failing the WAL", urc);
                atomic_store(&wal->failed, -EIO);
            }
        }
        goto out_release;
    }

    uint64_t ticket = take_ticket(wal);
    pthread_mutex_lock(&s->lock);
    /* The stream's run before this append's first: full now if the append started a new
     * run, and offered again below if its writeback was not taken when it filled. */
    block_t *before = NULL;
    if (s->n_blocks && s->blocks[s->n_blocks - 1] != chunks[0].b)
        before = s->blocks[s->n_blocks - 1];
    else if (s->n_blocks >= 2)
        before = s->blocks[s->n_blocks - 2];
    for (size_t i = 0; i < n_chunks; i++) {
        chunk_t *c = &chunks[i];
        block_t *b = c->b;
        if (c->is_new) {
            if (s->n_blocks) {
                block_t *prev = s->blocks[s->n_blocks - 1];
                if (!prev->full) {
                    prev->full = 1;
                    seal_later(wal, prev, ticket);
                }
            }
            if ((rc = stream_add_block(s, b))) {
                /* Out of memory while publishing: the data is on disk; recovery will find it. */
                atomic_store(&wal->failed, rc);
                break;
            }
            b->first_ts = ts;
        }
        uint64_t data_end = b->data_end;
        for (uint32_t j = 0; j < c->n; j++) {
            uint32_t r = c->first + j;
            b->data_end += REC_HDR_SIZE + (uint64_t)meta_lens[r] + value_lens[r];
            b->byte_len += value_lens[r] + 1ull;
        }
        s->written_bytes += (c->is_new ? BLK_HDR_SIZE : 0) + (b->data_end - data_end) + (uint64_t)c->n * SLOT_SIZE;
        b->count += c->n;
        b->last_gid = first_gid + c->first + c->n - 1;
        b->last_ts = ts;
        if (i + 1 < n_chunks) {
            b->full = 1;
            seal_later(wal, b, ticket);
        }
    }
    s->next_offset = offset + n;
    s->next_byte += view_total;
    s->last_ts = ts;
    pthread_mutex_unlock(&s->lock);
    if (!rc) {
        if (before && before->full) writeback_run(wal, before, nowait);
        for (size_t i = 0; i < n_chunks; i++) writeback_run(wal, chunks[i].b, nowait);
    }
    pthread_mutex_unlock(&s->append_lock);
    if (chunks != stack_chunks) free(chunks);
    if (slots != stack_slots) free(slots);
    if (rc) return rc;
    *first_gid_out = first_gid;
    *first_offset_out = offset;
    *ticket_out = ticket;
    if (wait && wal->opt.fsync_mode == WALFS_FSYNC_ALWAYS) return wait_durable(wal, ticket);
    return 0;

out_release:
    pthread_mutex_lock(&wal->lock);
    for (size_t i = 0; i < n_chunks; i++)
        if (chunks[i].is_new) release_run(wal, chunks[i].b);
    pthread_mutex_unlock(&wal->lock);
out_unlock:
    pthread_mutex_unlock(&s->append_lock);
out_free:
    if (chunks != stack_chunks) free(chunks);
    if (slots != stack_slots) free(slots);
    return rc;
}

static int append_checks(walfs_t *wal, uint32_t stream_no, stream_t **s)
{
    if (wal->opt.read_only) return -EROFS;
    int rc = atomic_load(&wal->failed);
    if (rc) return rc;
    if (!(*s = stream_get(wal, stream_no)) || (*s)->deleted) return -ENOENT;
    return 0;
}

/* bodies[i] for records whose bodies lie back to back in the concatenation of n_pieces
 * buffers: a pointer into its piece for a body inside one piece; a body that spans pieces
 * is copied, joined, into *joined (allocated here, NULL if none spans; the caller frees
 * it). -EINVAL if the pieces' bytes are not exactly the bodies' bytes. */
int bodies_from_pieces(uint32_t n, uint32_t n_pieces, const uint8_t *const *pieces, const uint64_t *piece_lens,
                       const uint32_t *meta_lens, const uint32_t *value_lens, const uint8_t **bodies, uint8_t **joined)
{
    *joined = NULL;
    uint64_t total = 0, have = 0;
    for (uint32_t i = 0; i < n; i++) total += (uint64_t)meta_lens[i] + value_lens[i];
    for (uint32_t k = 0; k < n_pieces; k++) have += piece_lens[k];
    if (have != total) return -EINVAL;
    /* Two passes: the bytes of the bodies that span pieces, then the pointers. */
    uint64_t spanning = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint32_t k = 0;
        uint64_t at = 0; /* in piece k */
        uint8_t *out = *joined;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t len = (uint64_t)meta_lens[i] + value_lens[i];
            while (k < n_pieces && at == piece_lens[k] && len) { /* past the end of piece k */
                k++;
                at = 0;
            }
            if (len == 0 || at + len <= piece_lens[k]) {
                bodies[i] = k < n_pieces ? pieces[k] + at : pieces[n_pieces - 1];
                at += len;
                continue;
            }
            if (pass == 0) spanning += len;
            else bodies[i] = out;
            for (uint64_t left = len; left;) { /* across pieces (the totals agree: in bounds) */
                if (at == piece_lens[k]) {
                    k++;
                    at = 0;
                    continue;
                }
                uint64_t take = piece_lens[k] - at < left ? piece_lens[k] - at : left;
                if (pass == 1) {
                    memcpy(out, pieces[k] + at, (size_t)take);
                    out += take;
                }
                at += take;
                left -= take;
            }
        }
        if (pass == 0) {
            if (!spanning) return 0; /* pass 0 set every pointer */
            if (!(*joined = malloc((size_t)spanning))) return -ENOMEM;
        }
    }
    return 0;
}

static int append_pieces(walfs_t *wal, uint32_t stream_no, uint32_t n, uint32_t n_pieces,
                         const uint8_t *const *pieces, const uint64_t *piece_lens, const uint32_t *meta_lens,
                         const uint32_t *value_lens, int wait, int nowait, uint64_t *first_gid_out,
                         uint64_t *first_offset_out, uint64_t *ticket_out)
{
    stream_t *s;
    int rc = append_checks(wal, stream_no, &s);
    if (rc) return rc;
    if (n == 0 || n_pieces == 0) return -EINVAL;
    const uint8_t **bodies = malloc((size_t)n * sizeof(*bodies));
    if (!bodies) return -ENOMEM;
    uint8_t *joined;
    rc = bodies_from_pieces(n, n_pieces, pieces, piece_lens, meta_lens, value_lens, bodies, &joined);
    if (!rc)
        rc = append_bodies(wal, s, n, bodies, meta_lens, value_lens, wait, nowait, first_gid_out, first_offset_out,
                           ticket_out);
    free(joined);
    free(bodies);
    return rc;
}

static int append_data(walfs_t *wal, uint32_t stream_no, uint32_t n, const uint8_t *data, const uint32_t *meta_lens,
                       const uint32_t *value_lens, int wait, int nowait, uint64_t *first_gid_out,
                       uint64_t *first_offset_out, uint64_t *ticket_out)
{
    /* One piece: every body lies in it (its length is the bodies' by the caller's word). */
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += (uint64_t)meta_lens[i] + value_lens[i];
    return append_pieces(wal, stream_no, n, 1, &data, &total, meta_lens, value_lens, wait, nowait, first_gid_out,
                         first_offset_out, ticket_out);
}

int walfs_append(walfs_t *wal, uint32_t stream_no, uint32_t n, const uint8_t *data, const uint32_t *meta_lens,
                 const uint32_t *value_lens, int wait, uint64_t *first_gid_out, uint64_t *first_offset_out,
                 uint64_t *ticket_out)
{
    return append_data(wal, stream_no, n, data, meta_lens, value_lens, wait, 0, first_gid_out, first_offset_out,
                       ticket_out);
}

int walfs_append_pieces(walfs_t *wal, uint32_t stream_no, uint32_t n, uint32_t n_pieces,
                        const uint8_t *const *pieces, const uint64_t *piece_lens, const uint32_t *meta_lens,
                        const uint32_t *value_lens, int wait, uint64_t *first_gid_out, uint64_t *first_offset_out,
                        uint64_t *ticket_out)
{
    return append_pieces(wal, stream_no, n, n_pieces, pieces, piece_lens, meta_lens, value_lens, wait, 0,
                         first_gid_out, first_offset_out, ticket_out);
}

int walfs_append_nowait(walfs_t *wal, uint32_t stream_no, uint32_t n, const uint8_t *data,
                        const uint32_t *meta_lens, const uint32_t *value_lens, uint64_t *first_gid_out,
                        uint64_t *first_offset_out, uint64_t *ticket_out)
{
    return append_data(wal, stream_no, n, data, meta_lens, value_lens, 0, 1, first_gid_out, first_offset_out,
                       ticket_out);
}

int64_t walfs_append_one(walfs_t *wal, uint32_t stream_no, const char *value, uint32_t len, int wait)
{
    /* One plain record: no arrays to build or free, so a single-record append from
     * Python is one C call (the stream handle's append, walfs/local_engine.py). */
    stream_t *s;
    int rc = append_checks(wal, stream_no, &s);
    if (rc) return rc;
    const uint8_t *body = (const uint8_t *)value;
    uint32_t meta = 0;
    uint64_t gid, offset, ticket;
    rc = append_bodies(wal, s, 1, &body, &meta, &len, wait, 0, &gid, &offset, &ticket);
    return rc ? rc : (int64_t)offset;
}

int walfs_append_lines(walfs_t *wal, uint32_t stream_no, const uint8_t *data, uint64_t len, int wait,
                       uint64_t *first_gid_out, uint64_t *first_offset_out, uint64_t *ticket_out, uint32_t *n_out)
{
    stream_t *s;
    int rc = append_checks(wal, stream_no, &s);
    if (rc) return rc;
    if (len == 0) return -EINVAL;
    /* Lines are the pieces between newlines; a final newline ends the last line. One
     * pass: the arrays grow as lines are found. */
    uint64_t n = 0, cap = 0;
    const uint8_t **bodies = NULL;
    uint32_t *lens = NULL, *metas = NULL;
    for (const uint8_t *p = data, *end = data + len; p < end; n++) {
        const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
        const uint8_t *stop = nl ? nl : end;
        if ((uint64_t)(stop - p) > UINT32_MAX || n == UINT32_MAX) {
            rc = -EMSGSIZE;
            goto out;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            const uint8_t **nb = realloc(bodies, cap * sizeof(*bodies));
            if (nb) bodies = nb;
            uint32_t *nlens = realloc(lens, cap * sizeof(*lens));
            if (nlens) lens = nlens;
            if (!nb || !nlens) {
                rc = -ENOMEM;
                goto out;
            }
        }
        bodies[n] = p;
        lens[n] = (uint32_t)(stop - p);
        p = nl ? nl + 1 : end;
    }
    if (!(metas = calloc(n, sizeof(*metas)))) {
        rc = -ENOMEM;
        goto out;
    }
    rc = append_bodies(wal, s, (uint32_t)n, bodies, metas, lens, wait, 0, first_gid_out, first_offset_out, ticket_out);
    if (!rc) *n_out = (uint32_t)n;
out:
    free(bodies);
    free(lens);
    free(metas);
    return rc;
}
