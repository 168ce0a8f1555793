"""Consumers: named cursors per stream (Walrus's readers, Kafka's committed offsets).

On disk (the contract; docs/format.md restates it): cursors/<group>/<stream key>, where
<stream key> is "<org_id>-<topic hash hex>-<partition>" (walfs.names.stream_key), holds 32
bytes: b"WALFSCUR" | u64 offset, little-endian | the first 16 bytes of blake3 of the 16
bytes before. It is replaced atomically (write <path>.tmp.<thread>, fsync, rename, fsync
the directory, and its parent when the group directory is new), so a crash leaves the old
or the new offset, never a mix; leftover .tmp files are ignored. A file of another length
or with a bad magic or checksum is damage: reading it raises WalCorruptError naming the file.

Groups belong to orgs (tenants): a group is listed for an org when it holds a cursor of one of
that org's streams (the key starts with "<org_id>-") or an org marker, cursors/<group>/.org-<org_id>,
an empty file made (and fsynced with its directory) by create_group, so that a group made
with `mkdir` before its first commit belongs to the org that made it. Two orgs may use the
same group name: their cursors never share a key. Names starting with "." are never cursors.

The commit rule itself (range, durability, advance-only) is Wal.commit_offset's: this
module only stores what it is given.
"""

import os
import struct
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import blake3

from walfs.errors import WalCorruptError
from walfs.names import topic_bytes

if TYPE_CHECKING:
    from walfs.records import Record
    from walfs.wal import Wal

_MAGIC = b"WALFSCUR"
_ORG_MARKER = ".org-"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def key_org(key: str) -> int | None:
    """The org of a cursor key ("<org_id>-<hash>-<partition>") or of an org marker."""
    head = key.removeprefix(_ORG_MARKER) if key.startswith(_ORG_MARKER) else key.split("-", 1)[0]
    return int(head) if head.isdigit() else None


class CursorStore:
    def __init__(self, dir_path: str, read_only: bool = False) -> None:
        self.root = os.path.join(dir_path, "cursors")
        self.read_only = read_only
        self._lock = threading.Lock()
        # group -> the orgs it belongs to; built by the first org-scoped listing (one scan),
        # then kept up to date by put and create_group (one process owns the directory).
        self._orgs: dict[str, set[int]] | None = None

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
                _fsync_dir(d)
            org = key_org(key)
            if self._orgs is not None and org is not None:
                self._orgs.setdefault(group, set()).add(org)
        return True

    def create_group(self, group: str, org_id: int = 1) -> None:
        """Makes the group exist in org_id (its marker file, durably); a no-op if it does."""
        gdir = os.path.dirname(self._path(group, "x"))
        marker = os.path.join(gdir, f"{_ORG_MARKER}{org_id}")
        if self.read_only:
            raise OSError(30, "read-only WAL")
        with self._lock:
            if os.path.exists(marker):
                return
            new_dir = not os.path.isdir(gdir)
            os.makedirs(gdir, exist_ok=True)
            with open(marker, "wb") as f:
                os.fsync(f.fileno())
            _fsync_dir(gdir)
            if new_dir:
                for d in (self.root, os.path.dirname(self.root)):
                    _fsync_dir(d)
            if self._orgs is not None:
                self._orgs.setdefault(group, set()).add(org_id)

    def forget(self, key: str) -> None:
        """Removes every group's cursor on one stream (its topic was deleted)."""
        with self._lock:
            for group in self.groups():
                path = os.path.join(self.root, group, key)
                try:
                    os.remove(path)
                except FileNotFoundError:
                    continue
                _fsync_dir(os.path.dirname(path))

    def groups(self, org_id: int | None = None) -> list[str]:
        """Every group, or those of one org."""
        try:
            names = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        except FileNotFoundError:
            return []
        if org_id is None:
            return names
        with self._lock:
            if self._orgs is None:
                self._orgs = {}
            # Groups this store has not seen (all of them the first time; afterwards those
            # another process made, for a read-only store) are scanned once.
            for g in names:
                if g not in self._orgs:
                    try:
                        entries = [e.name for e in os.scandir(os.path.join(self.root, g))]
                    except FileNotFoundError:
                        continue
                    orgs = {key_org(n) for n in entries if ".tmp." not in n}
                    self._orgs[g] = {o for o in orgs if o is not None}
            # A group without cursors or markers (an empty group made by a release before
            # org markers) holds nothing: it is listed for every org.
            return [g for g in names if org_id in self._orgs.get(g, ()) or not self._orgs.get(g)]

    def keys(self, group: str) -> Iterator[str]:
        """The stream keys of a group's cursors (not its org markers)."""
        try:
            yield from sorted(
                e.name
                for e in os.scandir(os.path.join(self.root, group))
                if ".tmp." not in e.name and not e.name.startswith(".")
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
        wal: "Wal",
        group: str,
        topic: str,
        partition: int,
        mode: str = "at_least_once",
        persist_every: int = 0,
    ) -> None:
        if mode not in ("at_least_once", "strictly_once"):
            raise ValueError(f"mode must be 'at_least_once' or 'strictly_once', not {mode!r}")
        topic_bytes(group)
        self.wal, self.group, self.topic, self.partition = wal, group, topic, partition
        self.mode = mode
        self.persist_every = persist_every
        self._reads = 0
        committed = wal.committed_offset(group, topic, partition)
        self.committed = committed
        self.position = max(committed or 0, wal.low_watermark(topic, partition))

    def read_next(self, max_records: int = 1000, max_bytes: int = 16 << 20) -> "list[Record]":
        """The next records, durable ones only (records published beyond the durable mark
        are synced first): a record handed out here is never taken back by a power cut."""
        self.position = max(self.position, self.wal.low_watermark(self.topic, self.partition))
        end = self.wal.durable_end(self.topic, self.position, self.partition)
        max_records = min(max_records, end - self.position)
        if max_records <= 0:
            return []
        recs = self.wal.read_records(self.topic, self.position, self.partition, max_records, max_bytes)
        if not recs:
            return recs
        self.position = recs[-1].offset + 1
        self._reads += 1
        if self.mode == "strictly_once" or (self.persist_every and self._reads % self.persist_every == 0):
            self.commit()
        return recs

    def commit(self, offset: int | None = None) -> None:
        target = self.position if offset is None else offset
        self.wal.commit_offset(self.group, self.topic, target, self.partition)
        self.committed = target

    def seek(self, offset: int) -> None:
        self.position = offset
