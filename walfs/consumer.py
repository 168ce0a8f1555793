"""Consumers: named cursors per stream (Walrus's readers, Kafka's committed offsets).

On disk (the contract; docs/format.md restates it): cursors/<group>/<stream key>, where
<stream key> is "<org_id>-<topic hash hex>-<partition>" (walfs.names.stream_key), holds 32
bytes: b"WALFSCUR" | u64 offset, little-endian | the first 16 bytes of blake3 of the 16
bytes before. It is replaced atomically (write <path>.tmp.<thread>, fsync, rename, fsync
the directory, and its parent when the group directory is new), so a crash leaves the old
or the new offset, never a mix; leftover .tmp files are ignored. A file of another length
or with a bad magic or checksum is damage: reading it raises WalCorruptError naming the file.

The commit rule itself (range, durability, advance-only) is LogEngine.commit's
(walfs/engine_api.py; the local engine keeps its cursors here): this module only stores
what it is given. Consumer is written against the engine interface alone.
"""

import os
import struct
import threading
from collections.abc import Iterator

import blake3

from walfs.engine_api import LogEngine, durable_end, read_records
from walfs.errors import ReadOnlyError, WalCorruptError
from walfs.names import topic_bytes
from walfs.records import Record

_MAGIC = b"WALFSCUR"


class CursorStore:
    def __init__(self, dir_path: str, read_only: bool = False) -> None:
        self.root = os.path.join(dir_path, "cursors")
        self.read_only = read_only
        self._lock = threading.Lock()

    def _path(self, group: str, key: str) -> str:
        topic_bytes(group)  # groups obey the same rules as topics
        return os.path.join(self.root, group, key)

    def get(self, group: str, key: str) -> int | None:
        try:
            with open(self._path(group, key), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if len(data) != 32 or data[:8] != _MAGIC or blake3.blake3(data[:16]).digest(length=16) != data[16:]:
            raise WalCorruptError(f"cursor file {self._path(group, key)} is damaged")
        return int(struct.unpack_from("<Q", data, 8)[0])

    def put(self, group: str, key: str, offset: int, *, advance_only: bool = False) -> bool:
        """Sets the cursor (only forward with advance_only: the check and the write are one
        step under the store's lock). Returns whether it changed."""
        path = self._path(group, key)
        if self.read_only:
            raise ReadOnlyError(f"cannot commit {path}: the WAL is open read-only")
        head = _MAGIC + struct.pack("<Q", offset)
        data = head + blake3.blake3(head).digest(length=16)
        gdir = os.path.dirname(path)
        with self._lock:
            if advance_only:
                current = self.get(group, key)
                if current is not None and current >= offset:
                    return False
            new_dir = not os.path.isdir(gdir)
            os.makedirs(gdir, exist_ok=True)
            tmp = f"{path}.tmp.{threading.get_ident()}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            for d in (gdir, self.root) if new_dir else (gdir,):
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        return True

    def create_group(self, group: str) -> None:
        gdir = os.path.dirname(self._path(group, "x"))
        if self.read_only:
            raise ReadOnlyError(f"cannot create group {group!r}: the WAL is open read-only")
        with self._lock:
            if os.path.isdir(gdir):
                return
            os.makedirs(gdir)
            for d in (self.root, os.path.dirname(self.root)):
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def forget(self, key: str) -> None:
        """Removes every group's cursor on one stream (its topic was deleted)."""
        with self._lock:
            for group in self.groups():
                path = os.path.join(self.root, group, key)
                try:
                    os.remove(path)
                except FileNotFoundError:
                    continue
                fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def groups(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        except FileNotFoundError:
            return []

    def keys(self, group: str) -> Iterator[str]:
        try:
            yield from sorted(
                e.name for e in os.scandir(os.path.join(self.root, group)) if ".tmp." not in e.name
            )
        except FileNotFoundError:
            return


class Consumer:
    """A group's cursor on one stream.

    mode "at_least_once": read_next advances `position` in memory and commit() makes it
    durable (every `persist_every` reads it commits by itself); after a crash, records
    read since the last commit are delivered again.
    mode "strictly_once": read_next makes the new position durable before it returns:
    a record is never delivered twice, and one read just before a crash is lost to the
    group (Walrus's StrictlyAtOnce).
    """

    def __init__(
        self,
        engine: LogEngine,
        group: str,
        topic: str,
        partition: int,
        mode: str = "at_least_once",
        persist_every: int = 0,
    ) -> None:
        if mode not in ("at_least_once", "strictly_once"):
            raise ValueError(f"mode must be 'at_least_once' or 'strictly_once', not {mode!r}")
        topic_bytes(group)
        self.engine, self.group, self.topic, self.partition = engine, group, topic, partition
        self.mode = mode
        self.persist_every = persist_every
        self._reads = 0
        committed = engine.committed(group, topic, partition)
        self.committed = committed
        self.position = max(committed or 0, engine.info(topic, partition).low_watermark)

    def read_next(self, max_records: int = 1000, max_bytes: int = 16 << 20) -> list[Record]:
        """The next records, durable ones only (records published beyond the durable mark
        are synced first): a record handed out here is never taken back by a power cut."""
        self.position = max(self.position, self.engine.info(self.topic, self.partition).low_watermark)
        end = durable_end(self.engine, self.topic, self.partition, self.position)
        max_records = min(max_records, end - self.position)
        if max_records <= 0:
            return []
        recs = read_records(self.engine, self.topic, self.partition, self.position, max_records, max_bytes)
        if not recs:
            return recs
        self.position = recs[-1].offset + 1
        self._reads += 1
        if self.mode == "strictly_once" or (self.persist_every and self._reads % self.persist_every == 0):
            self.commit()
        return recs

    def commit(self, offset: int | None = None) -> None:
        target = self.position if offset is None else offset
        self.engine.commit(self.group, self.topic, self.partition, target)
        self.committed = target

    def seek(self, offset: int) -> None:
        self.position = offset
