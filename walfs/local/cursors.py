"""The local engine's cursor store: one file per group and stream (Walrus's readers, Kafka's
committed offsets), and the manifest that lists them.

On disk (the contract; docs/format.md restates it): cursors/<group>/<stream key>, where
<stream key> is "<org_id>-<topic hash hex>-<partition>" (walfs.engine.names.stream_key), holds
the cursor twice (issue 36), in two slots of the same bytes: slot A at byte 0 and slot B at
the first 4 KiB boundary after slot A's end (byte 4096, or 8192 for metadata over 4060
bytes), zeros between, the file ending with slot B; so a zeroed 4 KiB page or 512-byte
sector, a flipped bit or a cut short file never takes both. A slot is b"WALFSCU3" | u64
offset, little-endian | u32 n | n bytes of UTF-8 metadata (Kafka's OffsetCommit metadata
string; n <= MAX_METADATA_BYTES, 0 for a commit without) | the first 16 bytes of blake3 of
"<group>\0<stream key>\0" followed by everything before in the slot: a slot written for
another file (a misdirected write) fails its check. A cursor costs 4 KiB + 36 + n bytes,
two 4 KiB blocks of a file system. The file is replaced atomically, both slots in one
write (write <path>.tmp.<thread>, fsync, rename, fsync the directory, and its parent when
the group directory is new: walfs.common.durable_file), so a crash leaves the old or the
new cursor, never a mix, and the two slots always hold the same bytes (no sequence is
needed); leftover .tmp files are ignored. One slot that fails its checks beside one that
proves itself is one damaged copy: the good slot is served, and a writer's read rewrites
the file from it and reports it (Heals in walfs/local/recovery_log.py); every writer's
open reads every cursor (CommitRule.clamp), so the open heals them all. Both slots bad, or
two slots that both verify but differ, is damage: reading it raises WalCorruptError naming
the file.
Older forms, read as they are and rewritten in the form above (an upgrade, not damage) by
a writer's first read, so at the writer's open: 32 bytes b"WALFSCUR" | u64 offset | blake3-16
of the 16 bytes before (a commit without metadata), and 36 + n bytes b"WALFSCU2" | u64
offset | u32 n | n bytes of metadata | blake3-16 of everything before; one copy, so damage
to either is the whole file's.

The cursor manifest lists every cursor file, so that a deleted one is reported instead of
read as "no cursor" (which would deliver the stream again from its low watermark): its base,
its journal, their copies and their upgrades are walfs/local/cursor_manifest.py's. A new
cursor file is written first and listed after (a crash between leaves a file that is not
listed: a writer's open lists every file it finds); a forgotten one is unlisted first and
deleted after. A listed file that is missing is damage (WalCorruptError naming the file), and
so are cursor files beside no manifest. Data directories from before the manifest (catalog
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

import os
import struct
import threading
from collections.abc import Iterator

import blake3

from walfs.common.durable_file import MIRROR, write_durable, write_many_durable
from walfs.common.durable_file import fsync_dir as _fsync_dir
from walfs.engine.names import topic_bytes
from walfs.engine.types import MAX_METADATA_BYTES
from walfs.errors import ReadOnlyError, WalCorruptError
from walfs.local.cursor_manifest import MANIFEST, CursorManifest, Listed
from walfs.local.recovery_log import Heals

__all__ = ["MANIFEST", "CursorStore", "key_org", "metadata_bytes"]

_MAGIC = b"WALFSCUR"  # the older forms (one copy)
_MAGIC_META = b"WALFSCU2"
_MAGIC_SLOT = b"WALFSCU3"  # a slot of the current form (two copies in the file)
_SLOT_HEAD = struct.Struct("<8sQI")
_PAGE = 4096  # slot B starts at the first boundary of this after slot A
_ORG_MARKER = ".org-"
_MAX_FILE = 2 * _PAGE + _SLOT_HEAD.size + 16 + MAX_METADATA_BYTES  # longer is damage


def _read(path: str) -> bytes:
    """A cursor file's bytes, bounded (a longer file is damage): one read() of a small file
    (os.read: no buffered file object, a third of the cost of open().read())."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, _MAX_FILE + 1)
    finally:
        os.close(fd)


def _ident(group: str, key: str) -> bytes:
    return group.encode() + b"\0" + key.encode() + b"\0"


def metadata_bytes(metadata: str) -> bytes:
    """A commit's metadata as stored: UTF-8, at most MAX_METADATA_BYTES (ValueError)."""
    raw = metadata.encode("utf-8")
    if len(raw) > MAX_METADATA_BYTES:
        raise ValueError(f"commit metadata of {len(raw)} bytes (at most {MAX_METADATA_BYTES})")
    return raw


def _encode(group: str, key: str, offset: int, metadata: str) -> bytes:
    """The cursor file: slot A, zeros to the next 4 KiB boundary, slot B (module doc)."""
    raw = metadata_bytes(metadata)
    head = _SLOT_HEAD.pack(_MAGIC_SLOT, offset, len(raw)) + raw
    slot = head + blake3.blake3(_ident(group, key) + head).digest(length=16)
    return _layout(slot)


def _after(slot: bytes) -> int:
    """Where slot B starts: the first 4 KiB boundary at or after slot A's end."""
    return len(slot) + (-len(slot) % _PAGE)


def _layout(slot: bytes) -> bytes:
    return slot + bytes(_after(slot) - len(slot)) + slot


def _slot(data: bytes, at: int, ident: bytes) -> tuple[tuple[int, str], bytes] | str:
    """The cursor in the slot at byte `at` and the slot's bytes, or what is wrong with it."""
    if len(data) < at + _SLOT_HEAD.size + 16:
        return "cut short"
    magic, offset, n = _SLOT_HEAD.unpack_from(data, at)
    if magic != _MAGIC_SLOT or n > MAX_METADATA_BYTES or len(data) < at + _SLOT_HEAD.size + n + 16:
        return "bad magic or length"
    end = at + _SLOT_HEAD.size + n
    if blake3.blake3(ident + data[at:end]).digest(length=16) != data[end : end + 16]:
        return "checksum mismatch"
    try:
        metadata = data[at + _SLOT_HEAD.size : end].decode("utf-8")
    except UnicodeDecodeError:
        return "metadata is not UTF-8"
    return (int(offset), metadata), data[at : end + 16]


def _decode_old(data: bytes) -> tuple[int, str] | None:
    """A cursor in one of the older forms (WALFSCUR, WALFSCU2), or None."""
    n = len(data) - 36
    if data[:8] == _MAGIC and len(data) == 32:
        body, metadata = data[:16], b""
    elif data[:8] == _MAGIC_META and 0 < n <= MAX_METADATA_BYTES and data[16:20] == n.to_bytes(4, "little"):
        body, metadata = data[: 20 + n], data[20 : 20 + n]
    else:
        return None
    if blake3.blake3(body).digest(length=16) != data[len(body) :]:
        return None
    try:
        return int(struct.unpack_from("<Q", data, 8)[0]), metadata.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _decode(data: bytes, ident: bytes, path: str) -> tuple[tuple[int, str], str | None, bytes | None]:
    """(cursor, what is wrong with one slot or None, the slot's bytes to rewrite the file
    from when it needs rewriting: one bad slot, or an older form) of a cursor file's bytes.
    WalCorruptError naming the file when no slot proves itself or two disagree."""
    old = _decode_old(data)
    if old is not None:
        return old, None, b""  # b"": an older form, rewritten in the current one
    a = _slot(data, 0, ident)
    b: tuple[tuple[int, str], bytes] | str = "missing"
    if isinstance(a, tuple):
        at = _after(a[1])
        if data[at:] == a[1]:  # the usual case: slot B is slot A's bytes, so it verifies too
            return a[0], None, None
        b = _slot(data, at, ident) if len(data) > at else "missing (file cut short)"
        if isinstance(b, tuple) and at + len(b[1]) != len(data):
            b = "bad length"
    else:
        for at in (_PAGE, 2 * _PAGE):
            got = _slot(data, at, ident)
            if isinstance(got, tuple) and at + len(got[1]) == len(data) and _after(got[1]) == at:
                b = got
                break
    if isinstance(a, tuple) and isinstance(b, tuple):
        if a[1] != b[1]:
            raise WalCorruptError(f"cursor file {path} is damaged: its two slots both verify but differ")
        return a[0], None, None
    if isinstance(a, tuple):
        return a[0], f"its second slot ({b})", a[1]
    if isinstance(b, tuple):
        return b[0], f"its first slot ({a})", b[1]
    raise WalCorruptError(f"cursor file {path} is damaged: both slots fail their checks ({a}; {b})")


def key_org(key: str) -> int | None:
    """The org of a cursor key ("<org_id>-<hash>-<partition>") or of an org marker."""
    head = key.removeprefix(_ORG_MARKER) if key.startswith(_ORG_MARKER) else key.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _is_cursor(name: str) -> bool:
    """Whether a name in a group directory is a cursor file (not a .tmp or an org marker)."""
    return ".tmp." not in name and not name.startswith(".")


class CursorStore:
    def __init__(
        self, dir_path: str, read_only: bool = False, legacy: bool = False, heals: Heals | None = None
    ) -> None:
        self.root = os.path.join(dir_path, "cursors")
        self.read_only = read_only
        self.legacy = legacy  # written before the manifest existed: it is built from the files
        self.heals = Heals(read_only) if heals is None else heals
        self._lock = threading.RLock()
        self._m = CursorManifest(dir_path, read_only, self.heals)
        self.manifest_path = self._m.path
        self._loaded = False  # the manifest is read on first use (self._m.listed)
        # group -> the orgs it belongs to; built by the first org-scoped listing (one scan),
        # then kept up to date by put and create_group (one process owns the directory).
        self._orgs: dict[str, set[int]] | None = None
        if not read_only:
            self._manifest()  # a writer's open heals and upgrades it (legacy: builds it)

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

    def read_manifest(self) -> Listed | None:
        """The manifest's list (walfs/local/cursor_manifest.py); None when it does not
        exist. A writer heals and upgrades its copies."""
        with self._lock:
            return self._m.read()

    def _manifest(self) -> Listed:
        """The cursor files that must exist, per group (loaded, checked and, by a writer,
        completed with the files it finds, on first use)."""
        with self._lock:
            if self._loaded:
                return self._m.listed
            listed = self._m.read()
            files = self._files()
            if listed is None:
                if files and not self.legacy:
                    raise WalCorruptError(
                        f"cursor manifest {self.manifest_path} is missing beside cursor files, "
                        f"and so is its copy {self.manifest_path + MIRROR}"
                    )
                listed = {}
            unlisted = {g: keys - listed.get(g, set()) for g, keys in files.items()}
            unlisted = {g: keys for g, keys in unlisted.items() if keys}
            if self.read_only or not unlisted:
                for g, keys in unlisted.items():  # served, not written
                    listed.setdefault(g, set()).update(keys)
                self._m.listed = listed
            elif not self._m.exists():
                self._m.rewrite(unlisted)  # built from the files (a legacy directory)
            else:
                self._m.change(add=unlisted)  # a crash between a new file and its listing
            self._loaded = True
            return self._m.listed

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
            data = _read(path)
        except FileNotFoundError:
            with self._lock:  # a put() in flight creates the file before it lists it
                if self.read_only:
                    self._loaded = False  # a live writer may have unlisted it since
                if key not in self._manifest().get(group, ()):
                    return None
                if os.path.exists(path):
                    return self.get_entry(group, key)
            raise WalCorruptError(f"cursor file {path} is missing: {self.manifest_path} lists it") from None
        entry, why, rewrite = _decode(data, _ident(group, key), path)
        if rewrite is not None and not self.read_only:
            self._rewrite(group, key, path)
        elif why is not None:
            self.heals.note(path, str(why), "its other slot")
        return entry

    def _rewrite(self, group: str, key: str, path: str) -> None:
        """A writer's read found one damaged slot, or an older form: the file is written
        again from what proves itself (under the lock, read again: a put may have come first)."""
        with self._lock:
            try:
                data = _read(path)
            except FileNotFoundError:
                return
            try:
                entry, why, rewrite = _decode(data, _ident(group, key), path)
            except WalCorruptError:
                return  # damaged since: the next read reports it
            if rewrite is None:
                return
            if rewrite:  # one good slot: both rewritten from its bytes
                write_durable(path, _layout(rewrite))
                self.heals.note(path, str(why), "its other slot")
            else:  # an older form: rewritten with its second slot
                write_durable(path, _encode(group, key, *entry))

    def put(
        self, group: str, key: str, offset: int, *, advance_only: bool = False, metadata: str = ""
    ) -> bool:
        """Sets the cursor and its metadata (only forward with advance_only: the check and
        the write are one step under the store's lock). Returns whether it changed."""
        return self.put_many(group, [(key, offset, metadata)], advance_only=advance_only)[0]

    def put_many(
        self, group: str, items: list[tuple[str, int, str]], *, advance_only: bool = False
    ) -> list[bool]:
        """put() of many (key, offset, metadata) of one group at once (a Kafka OffsetCommit
        of every partition a consumer holds): the files are written side by side
        (write_many_durable) and the new ones listed in one manifest change, after them, as
        put() does one by one. The first commit of a group over 100,000 streams was 100,000
        manifest rewrites (each listing every file: quadratic). Returns, per item, whether
        it changed. A key given twice keeps its last item."""
        if self.read_only:
            where = self._path(group, items[0][0]) if len(items) == 1 else self.root
            raise ReadOnlyError(f"cannot commit {where}: the WAL is open read-only")
        last = {key: k for k, (key, _o, _m) in enumerate(items)}
        with self._lock:
            changed = [False] * len(items)
            writes: list[tuple[str, bytes]] = []
            for k, (key, offset, metadata) in enumerate(items):
                if last[key] != k:
                    continue
                if advance_only:
                    current = self.get(group, key)
                    if current is not None and current >= offset:
                        continue
                writes.append((self._path(group, key), _encode(group, key, offset, metadata)))
                changed[k] = True
            if not writes:
                return changed
            listed = self._manifest()
            have = listed.get(group, set())
            new_keys = {key for k, (key, _o, _m) in enumerate(items) if changed[k] and key not in have}
            if new_keys and not self._m.exists():
                self._m.rewrite(listed)  # a file beside no manifest would be damage
            gdir = os.path.join(self.root, group)
            new_dir = not os.path.isdir(gdir)
            os.makedirs(gdir, exist_ok=True)
            write_many_durable(writes, then_fsync=(self.root,) if new_dir else ())
            if new_keys:  # listed once they exist: a crash before leaves them unlisted, not missing
                self._m.change(add={group: new_keys})
            if self._orgs is not None:
                for key in {key for k, (key, _o, _m) in enumerate(items) if changed[k]}:
                    org = key_org(key)
                    if org is not None:
                        self._orgs.setdefault(group, set()).add(org)
        return changed

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
            gone = {g: {key} for g, keys in listed.items() if key in keys}
            if gone:
                self._m.change(remove=gone)  # unlisted first: a crash leaves a file, not a hole
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
                self._m.change(remove={group: {key}})  # unlisted first: a crash leaves a file, not a hole
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
            gone = listed.get(group, set()) & {n for n in mine if _is_cursor(n)}
            if gone:
                self._m.change(remove={group: gone})  # unlisted first: a crash leaves files, not holes
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
