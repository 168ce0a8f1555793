/* catalog.c: streams.cat (stream definitions, trims, floors) and the stream table.
 * Every entry is fdatasync()ed before the call that wrote it returns. Version 3 keeps two
 * copies, streams.cat and streams.cat.mirror, written in the same durable step; an open
 * takes each entry from a copy where it proves itself, and a writer's open rewrites a
 * damaged copy (format.c: "Catalog", the merge rule). */
#include "internal.h"

#include <stddef.h>

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define CAT_NAME "streams.cat"
#define MIR_NAME "streams.cat.mirror"
static const char *const copy_name[2] = {CAT_NAME, MIR_NAME};

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
    stream_t *s = calloc(1, offsetof(stream_t, name) + name_len + 1);
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
            const stream_t *o = stream_get(wal, v - 1);
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
    for (size_t i = 0; i < s->n_blocks; i++) block_free(s->blocks[i]);
    free(s->blocks);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->append_lock);
    free(s);
}

int stream_add_block(stream_t *s, block_t *b)
{
    if (s->n_blocks == s->cap_blocks) {
        /* 3 first: the smallest malloc chunk (32 bytes) holds three pointers, and most of
         * 100,000 small streams hold one or two runs. */
        size_t cap = s->cap_blocks ? s->cap_blocks * 2 : 3;
        block_t **n = realloc(s->blocks, cap * sizeof(*n));
        if (!n) return -ENOMEM;
        s->blocks = n;
        s->cap_blocks = cap;
    }
    s->blocks[s->n_blocks++] = b;
    return 0;
}

/* Writes the header of a new catalog, both copies, each to <name>.tmp then renamed: the
 * mirror first, so that a crash leaves no streams.cat without its mirror's header. */
static int cat_create(walfs_t *wal)
{
    uint64_t uuid = 0;
    while (uuid == 0)
        if (getrandom(&uuid, sizeof(uuid), 0) != sizeof(uuid)) return -errno;
    uint64_t created = (uint64_t)now_ms();
    int rc = 0;
    for (int c = 1; c >= 0 && !rc; c--) {
        char tmp[64];
        snprintf(tmp, sizeof(tmp), "%s.tmp", copy_name[c]);
        int fd = openat(wal->dirfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) return -errno;
        uint8_t hdr[CAT_HDR_SIZE];
        fmt_cat_header(hdr, uuid, created, wal->opt.segment_size, wal->opt.block_size, 1, (uint32_t)c);
        if (pwrite(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) || fsync(fd) != 0) rc = errno ? -errno : -EIO;
        close(fd);
        /* The rename makes a half-created catalog impossible. */
        if (!rc && renameat(wal->dirfd, tmp, wal->dirfd, copy_name[c]) != 0) rc = -errno;
    }
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

static int cat_seg_add(walfs_t *wal, uint64_t id, uint64_t created_ms)
{
    if (wal->n_cat_segs && wal->cat_segs[wal->n_cat_segs - 1].id >= id) return -EUCLEAN;
    if (wal->n_cat_segs == wal->cap_cat_segs) {
        size_t cap = wal->cap_cat_segs ? wal->cap_cat_segs * 2 : 16;
        cat_seg_t *n = realloc(wal->cat_segs, cap * sizeof(*n));
        if (!n) return -ENOMEM;
        wal->cat_segs = n;
        wal->cap_cat_segs = cap;
    }
    wal->cat_segs[wal->n_cat_segs++] = (cat_seg_t){id, created_ms, 0};
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
        return cat_seg_add(wal, e->a, e->b);
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

/* The crc seed of the entry at byte `off` of copy `copy`: version 3 binds entries to
 * their place (format.c), older versions use the WAL's seed alone. */
static uint32_t entry_seed(const walfs_t *wal, uint32_t copy, uint64_t off)
{
    return wal->cat_version >= 3 ? fmt_cat_loc_seed(wal->crc_seed, copy, off, wal->cat_gen) : wal->crc_seed;
}

static size_t parse_at(const walfs_t *wal, const uint8_t *buf, size_t size, size_t pos, uint32_t copy, uint64_t base,
                       cat_entry_t *e, const char **why)
{
    return fmt_cat_entry_parse(buf + pos, size - pos, entry_seed(wal, copy, base + pos), e, why);
}

/* Torn-tail rule: entries are appended one pwrite at a time and fdatasync()ed before the
 * next, and a failed append is truncated away, so a crash can leave at most ONE incomplete
 * entry, at the very end. A bad entry at `pos` is therefore a torn tail exactly when the
 * bytes from it to the end of the file are no longer than the longest entry and no valid
 * entry (crc included) starts anywhere after it. Anything else is damage. */
static int torn_tail(const walfs_t *wal, const uint8_t *buf, size_t pos, size_t size, uint32_t copy, uint64_t base)
{
    if (size - pos > CAT_MAX_ENTRY) return 0;
    cat_entry_t e;
    const char *why;
    for (size_t q = pos + 1; q + 8 <= size; q++)
        if (parse_at(wal, buf, size, q, copy, base, &e, &why)) return 0;
    return 1;
}

/* apply(), and a message naming the entry when it does not fit those before it. */
static int apply_noted(walfs_t *wal, const cat_entry_t *e, int merge, const char *file, uint64_t at)
{
    int rc = apply(wal, e, merge);
    if (rc == -EUCLEAN && (e->type == CAT_SEGMENT || e->type == CAT_SEGMENT_GONE))
        wal_damage(wal, "%s/%s: entry at byte %" PRIu64 " (type %u, segment %" PRIu64 ") does not fit the entries before it",
                   wal->dir, file, at, e->type, e->a);
    else if (rc == -EUCLEAN)
        wal_damage(wal, "%s/%s: entry at byte %" PRIu64 " (type %u, stream %u) does not fit the entries before it",
                   wal->dir, file, at, e->type, e->stream_no);
    return rc;
}

/* Applies the entries of buf[0, size) (bytes of copy `copy` from `base`) up to a torn
 * tail, and counts them in wal->cat_entries; returns the bytes they take, or -EUCLEAN
 * (with a message naming the file and byte offset) for a damaged entry, or another -errno. */
static int64_t apply_all(walfs_t *wal, const uint8_t *buf, size_t size, int merge, uint64_t base, uint32_t copy)
{
    size_t pos = 0;
    cat_entry_t e;
    while (pos < size) {
        const char *why = "";
        size_t len = parse_at(wal, buf, size, pos, copy, base, &e, &why);
        if (len == 0) {
            if (torn_tail(wal, buf, pos, size, copy, base)) break;
            wal_damage(wal, "%s/%s: entry at byte %" PRIu64 " is damaged (%s) and is not a torn tail: %zu bytes follow it",
                       wal->dir, copy_name[copy], base + pos, why, size - pos);
            return -EUCLEAN;
        }
        int rc = apply_noted(wal, &e, merge, copy_name[copy], base + pos);
        if (rc) return rc;
        pos += len;
        wal->cat_entries++;
    }
    return (int64_t)pos;
}

/* A copy of the catalog as read at open. */
typedef struct cat_copy {
    int fd;                 /* -1: the file does not exist */
    uint8_t *buf;
    size_t size;
    int hdr_rc;             /* 0: its header proves itself */
    const char *hdr_why;
} cat_copy_t;

static void note_heal(walfs_t *wal, uint32_t copy, const char *fmt, uint64_t at, const char *why)
{
    char what[256];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(what, sizeof(what), fmt, at, why);
#pragma GCC diagnostic pop
    if (!(wal->cat_heal & (1 << copy))) wal->report.metadata_damaged++;
    if (!(wal->cat_heal & (1 << copy)))
        wal_log(wal, "%s: %s; served from %s%s", copy_name[copy], what, copy_name[1 - copy],
                wal->opt.read_only ? " (a writer's open will rewrite it)" : ", rewritten at this open");
    wal->cat_heal |= 1 << copy;
}

/* Version 3, both headers usable (or one: its copy's entries still bind to their place):
 * walks both copies in step. Each entry is taken from a copy where it proves itself (both:
 * they must agree); a valid entry in one copy where the other ends extends it (a crash
 * between the two writes: never acknowledged, keeping it is harmless); both bad at the
 * same byte ends the catalog only as a torn tail of both, otherwise it is damage. */
static int64_t merge_copies(walfs_t *wal, const cat_copy_t *cp)
{
    size_t pos = CAT_HDR_SIZE;
    for (;;) {
        cat_entry_t e[2];
        size_t len[2] = {0, 0};
        const char *why[2] = {"the file ends there", "the file ends there"};
        for (uint32_t c = 0; c < 2; c++)
            if (pos < cp[c].size) len[c] = parse_at(wal, cp[c].buf, cp[c].size, pos, c, 0, &e[c], &why[c]);
        if (!len[0] && !len[1]) {
            int torn0 = pos >= cp[0].size || torn_tail(wal, cp[0].buf, pos, cp[0].size, 0, 0);
            int torn1 = pos >= cp[1].size || torn_tail(wal, cp[1].buf, pos, cp[1].size, 1, 0);
            if (torn0 && torn1) return (int64_t)pos;
            wal_damage(wal, "%s/" CAT_NAME " and %s/" MIR_NAME ": both copies' entries at byte %zu are damaged "
                            "(%s; %s) and are not a torn tail",
                       wal->dir, wal->dir, pos, why[0], why[1]);
            return -EUCLEAN;
        }
        uint32_t c = len[0] ? 0 : 1;
        if (len[0] && len[1]) {
            if (len[0] != len[1] || memcmp(cp[0].buf + pos + 4, cp[1].buf + pos + 4, len[0] - 4) != 0) {
                wal_damage(wal, "%s/" CAT_NAME " and %s/" MIR_NAME ": the entries at byte %zu are both valid but differ",
                           wal->dir, wal->dir, pos);
                return -EUCLEAN;
            }
        } else if (pos >= cp[1 - c].size || torn_tail(wal, cp[1 - c].buf, pos, cp[1 - c].size, 1 - c, 0)) {
            note_heal(wal, 1 - c, "ends at byte %" PRIu64 " (%s), one entry short of its copy", pos, why[1 - c]);
        } else {
            note_heal(wal, 1 - c, "entry at byte %" PRIu64 " is damaged (%s)", pos, why[1 - c]);
        }
        int rc = apply_noted(wal, &e[c], 0, copy_name[c], pos);
        if (rc) return rc;
        pos += len[c];
        wal->cat_entries++;
    }
}

static int read_copy(walfs_t *wal, uint32_t c, cat_copy_t *cp)
{
    memset(cp, 0, sizeof(*cp));
    cp->fd = openat(wal->dirfd, copy_name[c], (wal->opt.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (cp->fd < 0) {
        cp->hdr_rc = -ENOENT;
        cp->hdr_why = "is missing";
        return errno == ENOENT ? 0 : -errno;
    }
    struct stat st;
    if (fstat(cp->fd, &st) != 0) return -errno;
    cp->size = (size_t)st.st_size;
    if (!(cp->buf = malloc(cp->size ? cp->size : 1))) return -ENOMEM;
    size_t got = 0;
    while (got < cp->size) {
        ssize_t n = pread(cp->fd, cp->buf + got, cp->size - got, (off_t)got);
        if (n < 0) return -errno;
        if (n == 0) break;
        got += (size_t)n;
    }
    cp->size = got;
    uint64_t uuid, seg_size;
    uint32_t block_size;
    cp->hdr_rc = cp->size >= CAT_HDR_SIZE ? fmt_cat_header_parse(cp->buf, &uuid, &seg_size, &block_size) : -EUCLEAN;
    if (!cp->hdr_rc && c == 1 && fmt_cat_header_version(cp->buf) < 3) cp->hdr_rc = -EUCLEAN;
    if (!cp->hdr_rc && fmt_cat_header_version(cp->buf) >= 3 && fmt_cat_header_copy(cp->buf) != c)
        cp->hdr_rc = -EXDEV;
    cp->hdr_why = cp->size < CAT_HDR_SIZE          ? "header (bytes 0..64) is cut short"
                  : cp->hdr_rc == -EBADMSG         ? "header (bytes 0..64) fails its crc"
                  : cp->hdr_rc == -EPROTONOSUPPORT ? "header (bytes 0..64) has an unknown format version"
                  : cp->hdr_rc == -EXDEV           ? "header (bytes 0..64) is the other copy's (a misdirected write)"
                                                   : "header (bytes 0..64) has a bad magic";
    return 0;
}

static void drop_copy(cat_copy_t *cp)
{
    if (cp->fd >= 0) close(cp->fd);
    free(cp->buf);
    cp->fd = -1;
    cp->buf = NULL;
}

static int use_header(walfs_t *wal, const uint8_t *hdr)
{
    uint64_t seg_size;
    uint32_t block_size;
    int rc = fmt_cat_header_parse(hdr, &wal->uuid, &seg_size, &block_size);
    if (rc) return rc;
    wal->opt.segment_size = seg_size;
    wal->opt.block_size = block_size;
    wal->cat_version = wal->cat_found = fmt_cat_header_version(hdr);
    wal->cat_gen = fmt_cat_header_generation(hdr);
    memcpy(wal->cat_hdr, hdr, CAT_HDR_SIZE);
    wal->crc_seed = crc_seed_for(wal->uuid);
    return 0;
}

static int cat_open_copies(walfs_t *wal, cat_copy_t *cp)
{
    int rc;
    for (uint32_t c = 0; c < 2; c++)
        if ((rc = read_copy(wal, c, &cp[c]))) return rc;
    if (cp[0].fd < 0 && cp[1].fd < 0 && !wal->opt.read_only) {
        if ((rc = cat_create(wal))) return rc;
        for (uint32_t c = 0; c < 2; c++) {
            drop_copy(&cp[c]);
            if ((rc = read_copy(wal, c, &cp[c]))) return rc;
        }
    }
    if (cp[0].fd < 0 && cp[1].fd < 0) return -ENOENT;
    int ok0 = !cp[0].hdr_rc, ok1 = !cp[1].hdr_rc;
    if (ok0 && fmt_cat_header_version(cp[0].buf) < 3) {
        /* Version 1 or 2: one copy, read as before (a writer's open upgrades it). */
        if (cp[1].fd >= 0) wal_log(wal, MIR_NAME ": ignored beside a version %u catalog", fmt_cat_header_version(cp[0].buf));
        drop_copy(&cp[1]);
        use_header(wal, cp[0].buf);
        int64_t used = apply_all(wal, cp[0].buf + CAT_HDR_SIZE, cp[0].size - CAT_HDR_SIZE, 0, CAT_HDR_SIZE, 0);
        if (used < 0) return (int)used;
        wal->cat_end = CAT_HDR_SIZE + (uint64_t)used;
        wal->cat_torn = cp[0].size - wal->cat_end;
        return 0;
    }
    if (!ok0 && !ok1) {
        if (cp[1].fd < 0)
            wal_damage(wal, "%s/" CAT_NAME ": %s", wal->dir, cp[0].hdr_why);
        else
            wal_damage(wal, "%s/" CAT_NAME ": %s, and %s/" MIR_NAME ": %s", wal->dir, cp[0].hdr_why, wal->dir,
                       cp[1].hdr_why);
        if (cp[1].fd >= 0) return -EUCLEAN;
        return cp[0].hdr_rc == -EPROTONOSUPPORT ? -EPROTONOSUPPORT : cp[0].hdr_rc == -EBADMSG ? -EBADMSG : -EUCLEAN;
    }
    if (ok0 && ok1) {
        uint64_t u0, u1, s0, s1;
        uint32_t b0, b1;
        fmt_cat_header_parse(cp[0].buf, &u0, &s0, &b0);
        fmt_cat_header_parse(cp[1].buf, &u1, &s1, &b1);
        if (u0 != u1 || s0 != s1 || b0 != b1) {
            wal_damage(wal, "%s/" CAT_NAME " and %s/" MIR_NAME ": headers are both valid but name different WALs or sizes",
                       wal->dir, wal->dir);
            return -EUCLEAN;
        }
    }
    uint32_t h = ok0 ? 0 : 1; /* the header used */
    if (!ok0 || !ok1) note_heal(wal, 1 - h, "%.0" PRIu64 "%s", 0, cp[1 - h].hdr_why);
    use_header(wal, cp[h].buf);
    uint64_t g0 = ok0 ? fmt_cat_header_generation(cp[0].buf) : 0, g1 = ok1 ? fmt_cat_header_generation(cp[1].buf) : 0;
    if (ok0 && ok1 && g0 != g1) {
        /* A compaction renamed one copy and not the other (crash between the renames):
         * both are whole, the newer holds the same facts; nothing was appended after it.
         * The newer one, or the older if the newer fails. */
        uint32_t first = g0 > g1 ? 0 : 1;
        for (int k = 0; k < 2; k++) {
            uint32_t c = k ? 1 - first : first;
            use_header(wal, cp[c].buf);
            int64_t used = apply_all(wal, cp[c].buf + CAT_HDR_SIZE, cp[c].size - CAT_HDR_SIZE, 0, CAT_HDR_SIZE, c);
            if (used >= 0) {
                note_heal(wal, 1 - c, "is generation %" PRIu64 "%s", fmt_cat_header_generation(cp[1 - c].buf),
                          ", its copy another (a compaction cut short)");
                wal->cat_end = CAT_HDR_SIZE + (uint64_t)used;
                if (c == 0) wal->cat_torn = cp[0].size - wal->cat_end;
                else wal->cat_torn2 = cp[1].size - wal->cat_end;
                if (wal->opt.read_only && c == 1) {
                    int t = cp[0].fd;
                    cp[0].fd = cp[1].fd;
                    cp[1].fd = t;
                    wal->cat_copy = 1;
                }
                return 0;
            }
            if (k == 0) { /* undo what it applied: start over from an empty table */
                size_t ns = atomic_load(&wal->n_streams);
                for (size_t i = 0; i < ns; i++) stream_free(stream_get(wal, (uint32_t)i));
                for (size_t i = 0; i < STREAM_CHUNKS; i++) {
                    free(wal->chunks[i]);
                    wal->chunks[i] = NULL;
                }
                atomic_store(&wal->n_streams, 0);
                free(wal->stream_ix);
                wal->stream_ix = NULL;
                wal->stream_ix_cap = wal->stream_ix_used = 0;
                wal->n_cat_segs = 0;
                wal->cat_entries = 0;
                wal->epoch = wal->next_gid = wal->floor_gid = 0;
                wal->damage[0] = 0;
            }
        }
        return -EUCLEAN;
    }
    int64_t end = merge_copies(wal, cp);
    if (end < 0) return (int)end;
    wal->cat_end = (uint64_t)end;
    wal->cat_torn = cp[0].size > wal->cat_end ? cp[0].size - wal->cat_end : 0;
    wal->cat_torn2 = cp[1].size > wal->cat_end ? cp[1].size - wal->cat_end : 0;
    if (wal->opt.read_only && (wal->cat_heal & 1) && cp[1].fd >= 0) {
        /* cat_refresh follows the good copy */
        int t = cp[0].fd;
        cp[0].fd = cp[1].fd;
        cp[1].fd = t;
        wal->cat_copy = 1;
    }
    return 0;
}

int cat_open(walfs_t *wal)
{
    cat_copy_t cp[2];
    memset(cp, 0, sizeof(cp));
    cp[0].fd = cp[1].fd = -1;
    int rc = cat_open_copies(wal, cp);
    if (!rc) {
        wal->cat_fd = cp[0].fd;
        cp[0].fd = -1;
        if (!wal->opt.read_only && wal->cat_version >= 3 && !(wal->cat_heal & 2)) {
            wal->cat_fd2 = cp[1].fd;
            cp[1].fd = -1;
        }
        if (wal->cat_fd < 0) wal->cat_torn = 0; /* a missing streams.cat: rewritten whole */
    }
    drop_copy(&cp[0]);
    drop_copy(&cp[1]);
    if (rc == -ENOENT) return -ENOENT;
    return rc;
}

/* A crash in the middle of an append (proven by torn_tail): nothing after it was ever
 * acknowledged. Cut only after recovery judged the rest: a catalog shorter than the
 * segments prove is damage, and damaged files are left as they are. */
int cat_cut_torn(walfs_t *wal)
{
    if (!wal->cat_torn && !wal->cat_torn2) return 0;
    if (wal->cat_torn)
        wal_log(wal, CAT_NAME ": cutting %" PRIu64 " bytes of torn tail at byte %" PRIu64, wal->cat_torn, wal->cat_end);
    if (wal->cat_torn2)
        wal_log(wal, MIR_NAME ": cutting %" PRIu64 " bytes of torn tail at byte %" PRIu64, wal->cat_torn2, wal->cat_end);
    if (!wal->opt.read_only) {
        int fds[2] = {wal->cat_fd, wal->cat_fd2};
        for (int c = 0; c < 2; c++)
            if (fds[c] >= 0 && (ftruncate(fds[c], (off_t)wal->cat_end) != 0 || fdatasync(fds[c]) != 0)) return -errno;
    }
    wal->cat_torn = wal->cat_torn2 = 0;
    return 0;
}

/* Read-only opens: applies entries a live writer appended since the catalog was read
 * (a trim written just before its segments were reclaimed, say). If the writer has
 * compacted the catalog meanwhile (a new file under the same name), reads that one whole. */
int cat_refresh(walfs_t *wal)
{
    struct stat st, named;
    if (fstat(wal->cat_fd, &st) != 0) return -errno;
    if (fstatat(wal->dirfd, copy_name[wal->cat_copy], &named, 0) == 0 && named.st_ino != st.st_ino) {
        int fd = openat(wal->dirfd, copy_name[wal->cat_copy], O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -errno;
        uint8_t hdr[CAT_HDR_SIZE];
        uint64_t uuid, seg_size;
        uint32_t block_size;
        if (fstat(fd, &st) != 0 || st.st_size < CAT_HDR_SIZE || pread(fd, hdr, sizeof(hdr), 0) != CAT_HDR_SIZE ||
            fmt_cat_header_parse(hdr, &uuid, &seg_size, &block_size) != 0 || uuid != wal->uuid) {
            close(fd);
            return -EUCLEAN;
        }
        /* A compaction (generation + 1), or the writer's upgrade of the version this open read. */
        wal->cat_version = fmt_cat_header_version(hdr);
        wal->cat_gen = fmt_cat_header_generation(hdr);
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
    int64_t got = n > 0 ? apply_all(wal, buf, (size_t)n, 1, wal->cat_end, wal->cat_copy) : 0;
    free(buf);
    if (got < 0) return (int)got;
    wal->cat_end += (uint64_t)got;
    return 0;
}

/* Compaction: once most entries are dead (every trim appends one, and a process that
 * trims often would grow the catalog without end), the catalog is rewritten with one
 * entry per fact still needed: each stream's DEFINE, its TRIM and FLOOR if any, and the
 * current epoch. Each copy is written beside the old one (<name>.tmp), both fsynced, then
 * renamed over them (streams.cat first) and the directory fsynced, so a crash leaves each
 * copy old or new, complete; the generation in the header, one higher than before, tells
 * the new from the old (cat_open). The same path upgrades a version 1 or 2 catalog and
 * heals a damaged copy. Under wal->lock (and so never during another catalog append);
 * epoch changes take wal->lock too. */
#define CAT_COMPACT_MIN 1024

static int write_file(walfs_t *wal, const char *name, const uint8_t *buf, size_t len, int *out_fd)
{
    int rc = 0;
    int fd = openat(wal->dirfd, name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    if ((rc = fault_hit(wal, WALFS_FAULT_WRITE)) == 0) {
        size_t done = 0;
        while (!rc && done < len) {
            ssize_t n = pwrite(fd, buf + done, len - done, (off_t)done);
            if (n <= 0) rc = n < 0 ? -errno : -EIO;
            else done += (size_t)n;
        }
    }
    if (!rc && fsync(fd) != 0) rc = -errno;
    if (rc) {
        close(fd);
        unlinkat(wal->dirfd, name, 0);
        return rc;
    }
    *out_fd = fd;
    return 0;
}

/* buf: a whole catalog image, entries sealed with the plain seed: binds them for `copy`
 * (version 3) in place. */
static void bind_all(const walfs_t *wal, uint8_t *buf, size_t len, uint32_t copy, uint64_t gen)
{
    for (size_t pos = CAT_HDR_SIZE; pos < len; pos += fmt_cat_entry_len(buf + pos))
        fmt_cat_bind(buf + pos, wal->crc_seed, copy, pos, gen);
}

static int cat_compact(walfs_t *wal, int upgrade)
{
    size_t ns = atomic_load(&wal->n_streams);
    size_t cap = CAT_HDR_SIZE + ns * (4 * 64 + MAX_NAME) + 64 + wal->n_segs * 24;
    uint8_t *buf = malloc(2 * cap);
    if (!buf) return -ENOMEM;
    uint8_t *copy1 = buf + cap;
    int rc = 0;
    int v3 = upgrade || wal->cat_version >= 3;
    memcpy(buf, wal->cat_hdr, CAT_HDR_SIZE); /* the header as it was read */
    size_t len = CAT_HDR_SIZE;
    uint64_t entries = 0;
    /* Catalog v2: the segment files that exist (reclaimed ones are gone from disk before
     * any compaction runs: walfs_reclaim unlinks before it compacts). */
    for (size_t i = 0; (upgrade || wal->cat_version >= 2) && i < wal->n_segs; i++) {
        len += fmt_cat_segment(buf + len, wal->crc_seed, CAT_SEGMENT, wal->segs[i]->id, wal->segs[i]->created_ms);
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
    uint64_t gen = wal->cat_gen + 1;
    int fd[2] = {-1, -1};
    if (v3) {
        memcpy(copy1, buf, len);
        fmt_cat_header_set(buf, gen, 0);
        fmt_cat_header_set(copy1, gen, 1);
        bind_all(wal, buf, len, 0, gen);
        bind_all(wal, copy1, len, 1, gen);
    }
    rc = write_file(wal, CAT_NAME ".tmp", buf, len, &fd[0]);
    if (!rc && v3) rc = write_file(wal, MIR_NAME ".tmp", copy1, len, &fd[1]);
    if (!rc && renameat(wal->dirfd, CAT_NAME ".tmp", wal->dirfd, CAT_NAME) != 0) rc = -errno;
    if (!rc && v3 && renameat(wal->dirfd, MIR_NAME ".tmp", wal->dirfd, MIR_NAME) != 0) {
        /* streams.cat is the new generation, its mirror the old: cat_open takes the newer
         * whole; from here on this handle must not append (it would bind to one only). */
        rc = -errno;
        atomic_store(&wal->failed, rc);
    }
    if (!rc) memcpy(wal->cat_hdr, buf, CAT_HDR_SIZE);
    free(buf);
    if (rc) {
        for (int c = 0; c < 2; c++)
            if (fd[c] >= 0) close(fd[c]);
        unlinkat(wal->dirfd, CAT_NAME ".tmp", 0);
        unlinkat(wal->dirfd, MIR_NAME ".tmp", 0);
        return rc; /* the old catalog stays in use, whole */
    }
    if (wal->cat_fd >= 0) close(wal->cat_fd);
    if (wal->cat_fd2 >= 0) close(wal->cat_fd2);
    wal->cat_fd = fd[0];
    wal->cat_fd2 = fd[1];
    wal->cat_end = len;
    wal->cat_torn = wal->cat_torn2 = 0;
    if (v3) wal->cat_gen = gen;
    wal_info(wal, "catalog: compacted %" PRIu64 " entries to %" PRIu64 "%s", wal->cat_entries, entries,
             upgrade && wal->cat_version < 3 ? " (upgraded to version 3, with its mirror)" : "");
    wal->cat_entries = entries;
    if (upgrade) wal->cat_version = CAT_VERSION;
    /* The rename is durable once the directory is; until then either file is complete,
     * but entries appended to the new one must not outlive a name that may revert: a
     * failed directory fsync fails the WAL like a failed catalog fdatasync. */
    if ((rc = fsync_dir(wal->dirfd))) atomic_store(&wal->failed, rc);
    return rc;
}

/* At a writer's open, after recovery judged the directory: a v3 catalog copy found
 * damaged (cat_open) is rewritten, both copies from the merged state, and a version 2
 * catalog (v1 too with v1_too: the Python layer's cursor manifest must exist first,
 * walfs/local/engine.py) becomes version 3 with its mirror. Under no lock (open) or
 * wal->lock (walfs_catalog_upgrade). */
int cat_heal_upgrade(walfs_t *wal, int v1_too)
{
    if (wal->opt.read_only) return 0;
    int heal = wal->cat_version >= 3 && (wal->cat_heal & 3);
    int upgrade = wal->cat_version == 2 || (v1_too && wal->cat_version == 1);
    if (!heal && !upgrade) return 0;
    int rc = cat_compact(wal, upgrade);
    if (rc) return rc;
    for (uint32_t c = 0; heal && c < 2; c++)
        if (wal->cat_heal & (1 << c)) {
            wal->report.healed++;
            wal_log(wal, "%s: rewritten from the good copy (healed)", copy_name[c]);
        }
    wal->cat_heal &= ~3;
    return 0;
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

/* Under wal->lock: fdatasync of both catalog copies, overlapped through a small ring of
 * the catalog's own when io_uring is there (the sync thread's ring is not shared). */
static int sync_copies(walfs_t *wal, const int *fds, int n)
{
    if (n == 2 && wal->cat_ring_state == 0)
        wal->cat_ring_state = !wal->opt.no_io_uring && io_uring_queue_init(4, &wal->cat_ring, 0) == 0 ? 1 : -1;
    if (n == 2 && wal->cat_ring_state == 1) {
        for (int c = 0; c < 2; c++) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&wal->cat_ring);
            if (!sqe) return -EIO;
            io_uring_prep_fsync(sqe, fds[c], IORING_FSYNC_DATASYNC);
        }
        int rc = io_uring_submit_and_wait(&wal->cat_ring, 2), first = 0;
        if (rc < 0) return rc;
        for (int c = 0; c < 2; c++) {
            struct io_uring_cqe *cqe;
            if ((rc = io_uring_wait_cqe(&wal->cat_ring, &cqe)) < 0) return rc;
            if (cqe->res < 0 && !first) first = cqe->res;
            io_uring_cqe_seen(&wal->cat_ring, cqe);
        }
        return first;
    }
    for (int c = 0; c < n; c++)
        if (fdatasync(fds[c]) != 0) return -errno;
    return 0;
}

void cat_ring_free(walfs_t *wal)
{
    if (wal->cat_ring_state == 1) io_uring_queue_exit(&wal->cat_ring);
    wal->cat_ring_state = 0;
}

/* Under wal->lock: n entries in one write and one fdatasync (per copy: version 3 writes
 * both copies, each entry bound to its place, then syncs both, before it returns). */
int cat_append_n(walfs_t *wal, const uint8_t *buf, size_t len, uint64_t n_entries)
{
    if (wal->opt.read_only) return -EROFS;
    int rc = fault_hit(wal, WALFS_FAULT_WRITE);
    if (rc) return rc;
    int copies = wal->cat_version >= 3 ? 2 : 1;
    int fds[2] = {wal->cat_fd, wal->cat_fd2};
    int split = copies == 2 ? fault_hit(wal, WALFS_FAULT_CAT_SPLIT) : 0; /* test mode: die between the copies */
    if (split) copies = 1;
    if (copies == 2 && fds[1] < 0) return -EIO; /* never: the open heals a missing mirror first */
    uint8_t *bound = NULL;
    if (wal->cat_version >= 3 && !(bound = malloc(len))) return -ENOMEM;
    for (int c = 0; c < copies; c++) {
        const uint8_t *out = buf;
        if (bound) {
            memcpy(bound, buf, len);
            for (size_t pos = 0; pos < len; pos += fmt_cat_entry_len(bound + pos))
                fmt_cat_bind(bound + pos, wal->crc_seed, (uint32_t)c, wal->cat_end + pos, wal->cat_gen);
            out = bound;
        }
        ssize_t n = pwrite(fds[c], out, len, (off_t)wal->cat_end);
        if (n != (ssize_t)len) {
            rc = n < 0 ? -errno : -ENOSPC;
            /* Leave no partial entry behind for the next append to follow. */
            for (int k = 0; k <= c; k++)
                if (ftruncate(fds[k], (off_t)wal->cat_end) != 0) wal_log(wal, "catalog truncate failed");
            free(bound);
            return rc;
        }
    }
    free(bound);
    rc = fault_hit(wal, WALFS_FAULT_SYNC);
    if (!rc) rc = sync_copies(wal, fds, copies);
    if (!rc && split) rc = split;
    if (rc) {
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
int cat_note_segment(walfs_t *wal, uint64_t seg_id, uint64_t created_ms)
{
    if (wal->cat_version < 2) return 0;
    uint8_t buf[24];
    size_t len = fmt_cat_segment(buf, wal->crc_seed, CAT_SEGMENT, seg_id, created_ms);
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
 * catalog is upgraded (rewritten as version 3 with its mirror) if walfs_catalog_upgrade
 * did not do it at the open. Version 1 waits for the Python layer's cursor manifest
 * (walfs/local/cursors.py), built at its open: a crash before that leaves version 1. */
int cat_close(walfs_t *wal)
{
    pthread_mutex_lock(&wal->lock);
    int rc = cat_append_marks(wal, NULL, 0, 0);
    if (!rc && wal->cat_version < 3 && (rc = cat_heal_upgrade(wal, 1)))
        wal_log(wal, "catalog upgrade to version 3 failed (%d); it stays version %u until a later open", rc,
                wal->cat_version);
    pthread_mutex_unlock(&wal->lock);
    /* Marks and the upgrade are optional (the catalog stays whole); a failed fsync is not. */
    return atomic_load(&wal->failed);
}

int walfs_catalog_upgrade(walfs_t *wal)
{
    if (wal->opt.read_only || wal->cat_version >= 3) return 0;
    pthread_mutex_lock(&wal->lock);
    int rc = cat_heal_upgrade(wal, 1);
    pthread_mutex_unlock(&wal->lock);
    return rc;
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
