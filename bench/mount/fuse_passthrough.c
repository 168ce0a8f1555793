/*
 * fuse_passthrough: a baseline for bench/mount/bench_mount.py.
 *
 *     fuse_passthrough BACKING_DIR MOUNTPOINT     # serves until fusermount3 -u / SIGTERM
 *
 * A plain C file system on the libfuse 3 low-level API that mirrors one flat directory
 * (regular files only, no subdirectories), single-threaded, with the same open flags as
 * the walfs mount (writers direct_io, readers keep_cache). Measured in the same run as
 * the walfs mount, it shows what a C libfuse server plus the kernel round trip costs per
 * request when every request is just one syscall on a backing file.
 *
 * FUSE inode numbers are the backing files' st_ino (FUSE_ROOT_ID for the directory); a
 * small table maps them back to names, so forget is a no-op.
 *
 * Build:
 *   gcc -O2 -Wall -Wextra -Werror -D_FILE_OFFSET_BITS=64 $(pkg-config --cflags fuse3) \
 *       bench/mount/fuse_passthrough.c $(pkg-config --libs fuse3) -o /tmp/fuse_passthrough
 */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static int dirfd_;                                   /* the backing directory */
static struct { fuse_ino_t ino; char *name; } *tab;  /* ino -> name; single-threaded */
static size_t ntab, captab;

static const char *name_of(fuse_ino_t ino)
{
    for (size_t i = 0; i < ntab; i++)
        if (tab[i].ino == ino)
            return tab[i].name;
    return NULL;
}

static int remember(fuse_ino_t ino, const char *name)
{
    char *n = strdup(name);
    size_t i = 0;
    while (i < ntab && tab[i].ino != ino)
        i++;
    if (n && i == captab) {
        void *t = realloc(tab, (2 * captab + 16) * sizeof *tab);
        if (t)
            tab = t, captab = 2 * captab + 16;
    }
    if (!n || i == captab)
        return free(n), ENOMEM;
    if (i == ntab)
        tab[ntab++].ino = ino;
    else
        free(tab[i].name);                     /* hard link or rename: keep the newest name */
    tab[i].name = n;
    return 0;
}

/* Fill an entry for a regular file already stat'ed as st, and record its name. */
static int make_entry(const char *name, const struct stat *st, struct fuse_entry_param *e)
{
    if (!S_ISREG(st->st_mode))
        return ENOENT;                         /* flat mirror: regular files only */
    if (st->st_ino == FUSE_ROOT_ID)
        return EIO;                            /* would collide with the root inode */
    memset(e, 0, sizeof *e);
    e->ino = st->st_ino;
    e->attr = *st;
    e->attr_timeout = e->entry_timeout = 1.0;
    return remember(e->ino, name);
}

/* stat an inode by name; 0 or errno. */
static int stat_ino(fuse_ino_t ino, struct stat *st)
{
    if (ino == FUSE_ROOT_ID) {
        if (fstat(dirfd_, st) < 0)
            return errno;
        st->st_ino = FUSE_ROOT_ID;
        return 0;
    }
    const char *name = name_of(ino);
    if (!name)
        return ESTALE;
    if (fstatat(dirfd_, name, st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno;
    return st->st_ino == ino ? 0 : ESTALE;     /* renamed or replaced behind our back */
}

static void pt_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct stat st;
    struct fuse_entry_param e;
    int err;
    if (parent != FUSE_ROOT_ID)
        err = ENOTDIR;
    else if (fstatat(dirfd_, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        err = errno;
    else
        err = make_entry(name, &st, &e);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_entry(req, &e);
}

static void pt_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    (void)ino, (void)nlookup;                  /* inode numbers are stable: nothing to drop */
    fuse_reply_none(req);
}

static void pt_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct stat st;
    int err;
    if (fi && ino != FUSE_ROOT_ID)            /* fstat on an open file handle */
        err = fstat(fi->fh, &st) < 0 ? errno : 0;
    else
        err = stat_ino(ino, &st);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_attr(req, &st, 1.0);
}

static void pt_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    const char *name = name_of(ino);
    struct stat st;
    int err = 0, fd = fi ? (int)fi->fh : -1;
    if (ino == FUSE_ROOT_ID || !name) {
        fuse_reply_err(req, ino == FUSE_ROOT_ID ? EPERM : ESTALE);
        return;
    }
    if ((to_set & FUSE_SET_ATTR_MODE) &&
        (fi ? fchmod(fd, attr->st_mode) : fchmodat(dirfd_, name, attr->st_mode, 0)) < 0)
        err = errno;
    if (!err && (to_set & FUSE_SET_ATTR_SIZE)) {
        int tfd = fi ? fd : openat(dirfd_, name, O_WRONLY | O_NOFOLLOW);
        if (tfd < 0 || ftruncate(tfd, attr->st_size) < 0)
            err = errno;
        if (!fi && tfd >= 0)
            close(tfd);
    }
    if (!err && (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
        struct timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}}, now = {0, UTIME_NOW};
        if (to_set & FUSE_SET_ATTR_ATIME)
            ts[0] = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : attr->st_atim;
        if (to_set & FUSE_SET_ATTR_MTIME)
            ts[1] = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : attr->st_mtim;
        if ((fi ? futimens(fd, ts) : utimensat(dirfd_, name, ts, AT_SYMLINK_NOFOLLOW)) < 0)
            err = errno;
    }
    if (!err)
        err = fi ? (fstat(fd, &st) < 0 ? errno : 0) : stat_ino(ino, &st);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_attr(req, &st, 1.0);
}

static void set_open_flags(struct fuse_file_info *fi, int fd)
{
    fi->fh = fd;
    if ((fi->flags & O_ACCMODE) == O_RDONLY)
        fi->keep_cache = 1;
    else
        fi->direct_io = 1;
}

static void pt_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    const char *name = name_of(ino);
    if (!name) {
        fuse_reply_err(req, ino == FUSE_ROOT_ID ? EISDIR : ESTALE);
        return;
    }
    int fd = openat(dirfd_, name, fi->flags & ~(O_CREAT | O_EXCL | O_NOCTTY));
    if (fd < 0) {
        fuse_reply_err(req, errno);
        return;
    }
    set_open_flags(fi, fd);
    if (fuse_reply_open(req, fi) != 0)
        close(fd);                             /* request was interrupted */
}

static void pt_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    struct fuse_entry_param e;
    struct stat st;
    if (parent != FUSE_ROOT_ID) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    int fd = openat(dirfd_, name, (fi->flags & ~O_NOCTTY) | O_CREAT, mode);
    int err = fd < 0 ? errno : fstat(fd, &st) < 0 ? errno : make_entry(name, &st, &e);
    if (err) {
        if (fd >= 0)
            close(fd);
        fuse_reply_err(req, err);
        return;
    }
    set_open_flags(fi, fd);
    if (fuse_reply_create(req, &e, fi) != 0)
        close(fd);
}

static void pt_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    if (parent != FUSE_ROOT_ID)
        fuse_reply_err(req, ENOTDIR);
    else
        fuse_reply_err(req, unlinkat(dirfd_, name, 0) < 0 ? errno : 0);
}

static void pt_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)ino;
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    buf.buf[0].fd = fi->fh;
    buf.buf[0].pos = off;
    fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);   /* libfuse preads (or splices) */
}

static void pt_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
                     off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    /* O_APPEND: the kernel's idea of the end may be stale; let the backing fd decide. */
    ssize_t n = (fi->flags & O_APPEND) ? write(fi->fh, buf, size) : pwrite(fi->fh, buf, size, off);
    if (n < 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_write(req, n);
}

static void pt_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino, (void)fi;
    fuse_reply_err(req, 0);
}

static void pt_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    close(fi->fh);
    fuse_reply_err(req, 0);
}

static void pt_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)ino;
    int r = datasync ? fdatasync(fi->fh) : fsync(fi->fh);
    fuse_reply_err(req, r < 0 ? errno : 0);
}

static void pt_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (ino != FUSE_ROOT_ID) {
        fuse_reply_err(req, ENOTDIR);
        return;
    }
    int fd = openat(dirfd_, ".", O_RDONLY | O_DIRECTORY);
    DIR *dp = fd < 0 ? NULL : fdopendir(fd);
    if (!dp) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        fuse_reply_err(req, err);
        return;
    }
    fi->fh = (uintptr_t)dp;
    if (fuse_reply_open(req, fi) != 0)
        closedir(dp);
}

static void pt_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)ino;
    DIR *dp = (DIR *)(uintptr_t)fi->fh;
    char *buf = malloc(size);
    size_t len = 0;
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    if (telldir(dp) != off)
        seekdir(dp, off);
    for (;;) {
        long before = telldir(dp);
        errno = 0;
        struct dirent *d = readdir(dp);
        if (!d) {
            if (errno && len == 0) {
                int err = errno;
                free(buf);
                fuse_reply_err(req, err);
                return;
            }
            break;
        }
        int dot = strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0;
        if (!dot && d->d_type != DT_REG && d->d_type != DT_UNKNOWN)
            continue;                          /* lookup would say ENOENT anyway */
        struct stat st = {.st_ino = dot ? FUSE_ROOT_ID : d->d_ino,
                          .st_mode = dot ? S_IFDIR : S_IFREG};
        size_t n = fuse_add_direntry(req, buf + len, size - len, d->d_name, &st, telldir(dp));
        if (n > size - len) {                  /* full: hand this entry out next time */
            seekdir(dp, before);
            break;
        }
        len += n;
    }
    fuse_reply_buf(req, buf, len);
    free(buf);
}

static void pt_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    closedir((DIR *)(uintptr_t)fi->fh);
    fuse_reply_err(req, 0);
}

static void pt_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs sv;
    if (fstatvfs(dirfd_, &sv) < 0)
        fuse_reply_err(req, errno);
    else
        fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ops = {
    .lookup = pt_lookup,     .forget = pt_forget,   .getattr = pt_getattr,
    .setattr = pt_setattr,   .unlink = pt_unlink,   .open = pt_open,
    .create = pt_create,     .read = pt_read,       .write = pt_write,
    .flush = pt_flush,       .release = pt_release, .fsync = pt_fsync,
    .opendir = pt_opendir,   .readdir = pt_readdir, .releasedir = pt_releasedir,
    .statfs = pt_statfs,
};

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s BACKING_DIR MOUNTPOINT\n", argv[0]);
        return 2;
    }
    if ((dirfd_ = open(argv[1], O_RDONLY | O_DIRECTORY)) < 0) {
        perror(argv[1]);
        return 1;
    }
    char *fargv[] = {argv[0], "-o", "fsname=fuse_passthrough,default_permissions", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    int ret = 1;
    if (!se) {
        fuse_opt_free_args(&args);
        return 1;
    }
    if (fuse_set_signal_handlers(se) == 0) {
        if (fuse_session_mount(se, argv[2]) == 0) {
            /* 0 once unmounted, the signal number after SIGTERM/SIGINT, or -errno */
            ret = fuse_session_loop(se) < 0;
            fuse_session_unmount(se);
        }
        fuse_remove_signal_handlers(se);
    }
    fuse_session_destroy(se);
    fuse_opt_free_args(&args);
    return ret;
}
