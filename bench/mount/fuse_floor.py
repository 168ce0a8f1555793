"""The floor under any pyfuse3 file system: a server that stores nothing.

    python bench/mount/fuse_floor.py MOUNTPOINT        # serves until unmounted

Files in the root: `f` always, others made by create (bench_mount.py's reads test
writes a new file per round). Writes are counted and dropped; reads return
newline-ended filler up to the size written so far. Attributes are cached for 1 s and
readers keep the kernel's page cache, so a second `cat` is served by the kernel: the
measured ceiling of a FUSE file's cached read here. Same pyfuse3, trio and kernel as the walfs mount,
same open flags (writers direct_io, readers keep_cache), so bench_mount.py can show, in
the same run, how much of the mount's time is pyfuse3 and the kernel round trip rather
than walfs. Not a file system anyone should use.
"""

from __future__ import annotations

import errno
import os
import stat
import sys

import pyfuse3
import trio

FILLER = (b"x" * 99 + b"\n") * (1 << 14)  # 1.6 MB, bigger than any READ request


class FloorOps(pyfuse3.Operations):
    def __init__(self) -> None:
        super().__init__()
        self.names: dict[bytes, int] = {b"f": 2}
        self.sizes: dict[int, int] = {2: 0}

    def _attrs(self, ino: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.attr_timeout = a.entry_timeout = 1.0
        if ino == pyfuse3.ROOT_INODE:
            a.st_mode = stat.S_IFDIR | 0o755
        else:
            a.st_mode = stat.S_IFREG | 0o644
            a.st_size = self.sizes[ino]
        return a

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._attrs(inode)

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        ino = self.names.get(name) if parent_inode == pyfuse3.ROOT_INODE else None
        if ino is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(ino)

    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        if parent_inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.EPERM)
        ino = self.names.setdefault(name, len(self.names) + 2)
        self.sizes.setdefault(ino, 0)
        return pyfuse3.FileInfo(fh=ino, direct_io=True, keep_cache=True), self._attrs(ino)

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        return self._attrs(inode)

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        writable = (flags & os.O_ACCMODE) != os.O_RDONLY
        return pyfuse3.FileInfo(fh=inode, direct_io=writable, keep_cache=True)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        n = max(0, min(size, self.sizes[fh] - off))
        return FILLER[:n]

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.sizes[fh] += len(buf)
        return len(buf)

    async def flush(self, fh: int) -> None:
        pass

    async def fsync(self, fh: int, datasync: bool) -> None:
        pass

    async def release(self, fh: int) -> None:
        pass


def main() -> None:
    pyfuse3.init(FloorOps(), sys.argv[1], ["fsname=fuse_floor"])
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close()


if __name__ == "__main__":
    main()
