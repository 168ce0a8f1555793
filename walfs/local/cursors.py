"""The local engine's cursor store: one file per group and stream (Walrus's readers, Kafka's
committed offsets), and the manifest that lists them.

On disk (the contract; docs/format.md restates it): cursors/<group>/<stream key>, where
<stream key> is "<org_id>-<topic hash hex>-<partition>" (walfs.engine.names.stream_key), holds
either 32 bytes: b"WALFSCUR" | u64 offset, little-endian | the first 16 bytes of blake3 of
the 16 bytes before; or, for a commit that carries metadata (Kafka's OffsetCommit
metadata string), 36 + n bytes: b"WALFSCU2" | u64 offset | u32 n | n bytes of UTF-8
metadata (n <= MAX_METADATA_BYTES) | blake3-16 of everything before. A commit without
metadata writes the first form, so such files are what older releases wrote and read;
an older release refuses the second form as damage. It is replaced atomically (write
<path>.tmp.<thread>, fsync, rename, fsync the directory, and its parent when the group
directory is new: walfs.common.durable_file), so a crash leaves the old or the new offset,
never a mix; leftover .tmp files are ignored. A file of another length or with a bad
magic or checksum is damage: reading it raises WalCorruptError naming the file.

The cursor manifest, cursors.manifest in the data directory (any name may be a group),
lists every cursor file, so that a deleted one is reported instead of read as "no cursor"
(which would deliver the stream again from its low watermark):
b"WALFSCMF" | u32 version (1) | u32 N | N bytes of UTF-8 JSON {"<group>": ["<stream key>",
...]} | the first 16 bytes of blake3 of everything before.
Replaced atomically like a cursor file. A new cursor file is written first and listed
after (a crash between leaves a file that is not listed: a writer's open lists every file
it finds); a forgotten one is unlisted first and deleted after. A listed file that is
missing, a damaged manifest, and a missing manifest beside cursor files are damage
(WalCorruptError naming the file). Data directories from before the manifest (catalog
version 1, `legacy`) get one, built from the files, at a writer's open; the catalog is
upgraded right after it, at the same open (walfs/local/engine.py: walfs_catalog_upgrade).

Groups belong to orgs (tenants): a group is listed for an org when it holds a cursor of one of
that org's streams (the key starts with "<org_id>-") or an org marker, cursors/<group>/.org-<org_id>,
an empty file made (and fsynced with its directory) by create_group, so that a group made
with `mkdir` before its first commit belongs to the org that made it. Two orgs may use the
same group name: their cursors never share a key. Names starting with "." are never cursors
(and never in the manifest).

The commit rule itself (range, durability, advance-only) is LogEngine.commit's
(walfs/engine/contract.py; the local engine keeps its cursors here): this module only stores
what it is given. The Consumer of the Python API (walfs/consumer.py) is written against the
engine interface alone.
"""

import json
import os
import struct
import threading
from collections.abc import Iterator

import blake3

from walfs.common.durable_file import fsync_dir as _fsync_dir
from walfs.common.durable_file import write_durable
from walfs.engine.names import topic_bytes
from walfs.engine.types import MAX_METADATA_BYTES
from walfs.errors import ReadOnlyError, WalCorruptError

_MAGIC = b"WALFSCUR"
_MANIFEST_MAGIC = b"WALFSCMF"
_MANIFEST_VERSION = 1
MANIFEST = "cursors.manifest"  # in the data directory: any name may be a group
_ORG_MARKER = ".org-"


_MAGIC_META = b"WALFSCU2"


def _encode(offset: int, metadata: str) -> bytes:
    raw = metadata.encode("utf-8")
    if len(raw) > MAX_METADATA_BYTES:
        raise ValueError(f"commit metadata of {len(raw)} bytes (at most {MAX_METADATA_BYTES})")
    if raw:
        head = _MAGIC_META + struct.pack("<QI", offset, len(raw)) + raw
    else:
        head = _MAGIC + struct.pack("<Q", offset)
    return head + blake3.blake3(head).digest(length=16)


def key_org(key: str) -> int | None:
    """The org of a cursor key ("<org_id>-<hash>-<partition>") or of an org marker."""
    head = key.removeprefix(_ORG_MARKER) if key.startswith(_ORG_MARKER) else key.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _is_cursor(name: str) -> bool:
    """Whether a name in a group directory is a cursor file (not a .tmp or an org marker)."""
    return ".tmp." not in name and not name.startswith(".")


class CursorStore:
    def __init__(self, dir_path: str, read_only: bool = False, legacy: bool = False) -> None:
        self.root = os.path.join(dir_path, "cursors")
        self.read_only = read_only
        self.legacy = legacy  # written before the manifest existed: it is built from the files
        self._lock = threading.RLock()
        self.manifest_path = os.path.join(dir_path, MANIFEST)
        self._listed: dict[str, set[str]] | None = None  # the manifest, loaded on first use
        # group -> the orgs it belongs to; built by the first org-scoped listing (one scan),
        # then kept up to date by put and create_group (one process owns the directory).
        self._orgs: dict[str, set[int]] | None = None
        if legacy and not read_only:
            self._manifest()  # built now: the engine upgrades the catalog right after

    # -- the manifest -----------------------------------------------------------------
    def _files(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        try:
            groups = [e.name for e in os.scandir(self.root) if e.is_dir()]
        except FileNotFoundError:
            return out
        for g in groups:
            try:
                keys = {e.name for e in os.scandir(os.path.join(self.root, g)) if _is_cursor(e.name)}
            except FileNotFoundError:
                continue
            if keys:
                out[g] = keys
        return out

    def read_manifest(self) -> dict[str, set[str]] | None:
        path = self.manifest_path
        try:
            with open(path, "rb") as f:
                data = f.read(1 << 26)
        except FileNotFoundError:
            return None
        ok = len(data) >= 32 and data[:8] == _MANIFEST_MAGIC
        n = struct.unpack_from("<I", data, 12)[0] if ok else 0
        ok = ok and struct.unpack_from("<I", data, 8)[0] == _MANIFEST_VERSION and len(data) == 16 + n + 16
        ok = ok and blake3.blake3(data[:-16]).digest(length=16) == data[-16:]
        try:
            listed = json.loads(data[16 : 16 + n].decode()) if ok else None
        except (UnicodeDecodeError, ValueError):
            listed = None
        if not isinstance(listed, dict) or not all(
            isinstance(g, str) and isinstance(v, list) and all(isinstance(k, str) for k in v)
            for g, v in listed.items()
        ):
            raise WalCorruptError(f"cursor manifest {path} is damaged")
        return {g: set(v) for g, v in listed.items()}

    def _write_manifest(self, listed: dict[str, set[str]]) -> None:
        body = json.dumps({g: sorted(v) for g, v in sorted(listed.items()) if v}).encode()
        head = _MANIFEST_MAGIC + struct.pack("<II", _MANIFEST_VERSION, len(body)) + body
        write_durable(self.manifest_path, head + blake3.blake3(head).digest(length=16))

    def _manifest(self) -> dict[str, set[str]]:
        """The cursor files that must exist, per group (loaded, checked and, by a writer,
        completed with the files it finds, on first use)."""
        with self._lock:
            if self._listed is not None:
                return self._listed
            listed = self.read_manifest()
            files = self._files()
            if listed is None:
                if files and not self.legacy:
                    raise WalCorruptError(
                        f"cursor manifest {self.manifest_path} is missing beside cursor files"
                    )
                listed = {}
            merged = {g: listed.get(g, set()) | files.get(g, set()) for g in set(listed) | set(files)}
            if not self.read_only and merged != listed:
                self._write_manifest(merged)  # a crash between a new file and its listing
            self._listed = merged
            return merged

    def _path(self, group: str, key: str) -> str:
        topic_bytes(group)  # groups obey the same rules as topics
        return os.path.join(self.root, group, key)

    def get(self, group: str, key: str) -> int | None:
        entry = self.get_entry(group, key)
        return None if entry is None else entry[0]

    def get_entry(self, group: str, key: str) -> tuple[int, str] | None:
        """(offset, metadata) of the cursor, or None when the group never committed."""
        path = self._path(group, key)
        try:
            with open(path, "rb") as f:
                data = f.read(36 + MAX_METADATA_BYTES + 1)  # bounded: a longer file is damage
        except FileNotFoundError:
            with self._lock:  # a put() in flight creates the file before it lists it
                if self.read_only:
                    self._listed = None  # a live writer may have unlisted it since
                if key not in self._manifest().get(group, ()):
                    return None
                if os.path.exists(path):
                    return self.get_entry(group, key)
            raise WalCorruptError(f"cursor file {path} is missing: {self.manifest_path} lists it") from None
        n = len(data) - 36
        if data[:8] == _MAGIC and len(data) == 32:
            body, metadata = data[:16], b""
        elif (
            data[:8] == _MAGIC_META
            and 0 < n <= MAX_METADATA_BYTES
            and struct.unpack_from("<I", data, 16)[0] == n
        ):
            body, metadata = data[: 20 + n], data[20 : 20 + n]
        else:
            raise WalCorruptError(f"cursor file {path} is damaged")
        if blake3.blake3(body).digest(length=16) != data[len(body) :]:
            raise WalCorruptError(f"cursor file {path} is damaged")
        try:
            return int(struct.unpack_from("<Q", data, 8)[0]), metadata.decode("utf-8")
        except UnicodeDecodeError as e:
            raise WalCorruptError(f"cursor file {path} is damaged") from e

    def put(
        self, group: str, key: str, offset: int, *, advance_only: bool = False, metadata: str = ""
    ) -> bool:
        """Sets the cursor and its metadata (only forward with advance_only: the check and
        the write are one step under the store's lock). Returns whether it changed."""
        path = self._path(group, key)
        if self.read_only:
            raise ReadOnlyError(f"cannot commit {path}: the WAL is open read-only")
        data = _encode(offset, metadata)
        gdir = os.path.dirname(path)
        with self._lock:
            if advance_only:
                current = self.get(group, key)
                if current is not None and current >= offset:
                    return False
            listed = self._manifest()
            new_key = key not in listed.get(group, ())
            if new_key and not os.path.exists(self.manifest_path):
                self._write_manifest(listed)  # a file beside no manifest would be damage
            new_dir = not os.path.isdir(gdir)
            os.makedirs(gdir, exist_ok=True)
            write_durable(path, data, then_fsync=(self.root,) if new_dir else ())
            if new_key:  # listed once it exists: a crash before leaves it unlisted, not missing
                listed.setdefault(group, set()).add(key)
                self._write_manifest(listed)
            org = key_org(key)
            if self._orgs is not None and org is not None:
                self._orgs.setdefault(group, set()).add(org)
        return True

    def create_group(self, group: str, org_id: int = 1) -> None:
        """Makes the group exist in org_id (its marker file, durably); a no-op if it does."""
        gdir = os.path.dirname(self._path(group, "x"))
        marker = os.path.join(gdir, f"{_ORG_MARKER}{org_id}")
        if self.read_only:
            raise ReadOnlyError(f"cannot create group {group!r}: the WAL is open read-only")
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
            listed = self._manifest()
            if any(key in keys for keys in listed.values()):
                for keys in listed.values():
                    keys.discard(key)
                self._write_manifest(listed)  # unlisted first: a crash leaves a file, not a hole
            for group in self.groups():
                path = os.path.join(self.root, group, key)
                try:
                    os.remove(path)
                except FileNotFoundError:
                    continue
                _fsync_dir(os.path.dirname(path))

    def delete(self, group: str, key: str) -> bool:
        """Removes one cursor, durably; False when there was none."""
        path = self._path(group, key)
        if self.read_only:
            raise OSError(30, "read-only WAL")
        with self._lock:
            listed = self._manifest()
            if key in listed.get(group, ()):
                listed[group].discard(key)
                self._write_manifest(listed)  # unlisted first: a crash leaves a file, not a hole
            try:
                os.remove(path)
            except FileNotFoundError:
                return False
            _fsync_dir(os.path.dirname(path))
        return True

    def delete_group(self, group: str, org_id: int | None = None) -> bool:
        """Removes a group with all its cursors (with org_id: only that org's cursors and
        marker; the directory goes when nothing else is left), durably; False when it did
        not exist (in that org)."""
        gdir = os.path.dirname(self._path(group, "x"))
        if self.read_only:
            raise OSError(30, "read-only WAL")
        with self._lock:
            try:
                names = [n for n in os.listdir(gdir) if ".tmp." not in n]
            except FileNotFoundError:
                return False
            mine = [n for n in names if org_id is None or key_org(n) == org_id]
            if names and not mine:
                return False  # another org's group of the same name
            listed = self._manifest()
            gone = {n for n in mine if _is_cursor(n)}
            if listed.get(group, set()) & gone:
                listed[group] -= gone
                if not listed[group]:
                    del listed[group]
                self._write_manifest(listed)  # unlisted first: a crash leaves files, not holes
            for name in mine:
                os.remove(os.path.join(gdir, name))
            if len(mine) == len(names):
                for name in os.listdir(gdir):  # leftover .tmp files of crashed commits
                    os.remove(os.path.join(gdir, name))
                os.rmdir(gdir)
                _fsync_dir(self.root)
                if self._orgs is not None:
                    self._orgs.pop(group, None)
            else:
                _fsync_dir(gdir)
                if self._orgs is not None and org_id is not None:
                    self._orgs.get(group, set()).discard(org_id)
        return True

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
        """The group's cursors (not its org markers): the files, and listed ones that are
        missing (get() then reports them)."""
        try:
            found = {e.name for e in os.scandir(os.path.join(self.root, group)) if _is_cursor(e.name)}
        except FileNotFoundError:
            found = set()
        yield from sorted(found | self._manifest().get(group, set()))
