"""Consumer cursors and groups on the meta topic: their records both ways (a commit, a
forget and create_group write them; the replay hands each one it meets to `apply`), the
maps they replay into, and the contract's cursor calls (commit, committed, forget, groups,
create_group) for the org a call names.

    b"c" group \\0 stream-key  -> u64 offset | u8 advance_only | metadata   (None: forgotten)
    b"G" u64 org | group        -> b""   a group of an org, made before its first commit
    b"g" group                  -> b""   a group of every org (written by older releases)

The commit rule is the contract's (walfs/engine/contract.py): an offset up to the stream's
end, advance-only when asked; two engines committing at once are ordered by the meta topic.
"""

from __future__ import annotations

from walfs.cluster.layout import U64, key_org, org_bytes, stream_key_bytes
from walfs.cluster.producing import Writer
from walfs.cluster.state import ClusterState
from walfs.engine.names import check_partition, topic_bytes
from walfs.engine.types import MAX_METADATA_BYTES
from walfs.errors import OffsetOutOfRangeError, WalCorruptError

KINDS = (b"c", b"g", b"G")  # the meta keys' first bytes that are this module's


def cursor_key(group: bytes, stream_key: bytes) -> bytes:
    return b"c" + group + b"\0" + stream_key


class Cursors:
    """The cursors and groups of a namespace, as replayed (every org's)."""

    def __init__(self, state: ClusterState, writer: Writer) -> None:
        self.state = state
        self.writer = writer
        self.cursors: dict[str, dict[bytes, int]] = {}  # group -> stream key -> offset
        self.group_orgs: dict[str, set[int]] = {}  # groups made by create_group (-1: every org)
        self.cursor_meta: dict[tuple[str, bytes], str] = {}

    # -- the replay's side (under the state's lock) ----------------------------------------
    def apply(self, kind: bytes, rest: bytes, value: bytes | None, where: str) -> None:
        """One meta record of a KINDS key (`rest`: the key after its first byte)."""
        if kind == b"c":
            group, _, skey = rest.partition(b"\0")
            g = group.decode("utf-8", "replace")
            if value is None:
                self.cursors.get(g, {}).pop(skey, None)
                return
            if not 9 <= len(value) <= 9 + MAX_METADATA_BYTES:
                raise WalCorruptError(f"{where}: cursor value of {len(value)} bytes")
            (offset,) = U64.unpack_from(value)
            cur = self.cursors.setdefault(g, {})
            if value[8] and cur.get(skey, -1) >= offset:
                return
            cur[skey] = offset
            self.cursor_meta[(g, skey)] = value[9:].decode("utf-8", "replace")
            return
        if kind == b"G" and len(rest) < 8:
            raise WalCorruptError(f"{where}: group key too short")
        org = int.from_bytes(rest[:8], "little") if kind == b"G" else -1
        g = (rest[8:] if kind == b"G" else rest).decode("utf-8", "replace")
        if value is None:
            self.group_orgs.get(g, set()).discard(org)
            if not self.group_orgs.get(g, True):
                del self.group_orgs[g]
        else:
            self.group_orgs.setdefault(g, set()).add(org)

    def stream_deleted(self, key: bytes) -> None:
        """The replay met a stream's delete mark: its cursors go with it."""
        for cur in self.cursors.values():
            cur.pop(key, None)

    # -- the contract's calls, for one org ----------------------------------------------------
    def committed(self, org: int, group: str, topic: str, partition: int) -> tuple[int, str] | None:
        topic_bytes(group)
        key = stream_key_bytes(org, topic, check_partition(partition))
        offset = self.cursors.get(group, {}).get(key)
        return None if offset is None else (offset, self.cursor_meta.get((group, key), ""))

    def commit(
        self, org: int, group: str, topic: str, partition: int, offset: int, advance_only: bool, metadata: str
    ) -> bool:
        gb = topic_bytes(group)
        raw_meta = metadata.encode("utf-8")
        if len(raw_meta) > MAX_METADATA_BYTES:
            raise ValueError(f"commit metadata of {len(raw_meta)} bytes (at most {MAX_METADATA_BYTES})")
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"cannot commit offset {offset!r} of {topic!r}[{partition}]")
        key = stream_key_bytes(org, topic, check_partition(partition))
        s = self.state.streams.get(key)
        high = s.next if s else 0
        if offset > high:
            raise OffsetOutOfRangeError(
                f"cannot commit offset {offset} of {topic!r}[{partition}]: the end is {high}"
            )
        before = self.cursors.get(group, {}).get(key)
        if advance_only and before is not None and before >= offset:
            return False
        self.writer.meta(cursor_key(gb, key), U64.pack(offset) + bytes([advance_only]) + raw_meta)
        return self.cursors.get(group, {}).get(key) == offset and before != offset

    def forget_cursor(self, org: int, group: str, topic: str, partition: int) -> bool:
        gb = topic_bytes(group)
        key = stream_key_bytes(org, topic, check_partition(partition))
        if key not in self.cursors.get(group, {}):
            return False
        self.writer.meta(cursor_key(gb, key), None)
        return True

    def orgs_of(self, group: str) -> set[int]:
        """The orgs a group belongs to: those of its cursors' streams and of its create_group
        records (-1: a group of every org, written by an older release)."""
        orgs = {key_org(k) for k in self.cursors.get(group, {})}
        return orgs | self.group_orgs.get(group, set())

    def has_group(self, org: int, group: str) -> bool:
        orgs = self.orgs_of(group)
        return org in orgs or orgs == {-1}

    def forget_group(self, org: int, group: str) -> bool:
        gb = topic_bytes(group)
        if not self.has_group(org, group):
            return False
        ob = org_bytes(org)
        for key in list(self.cursors.get(group, {})):
            if key[:8] == ob:
                self.writer.meta(cursor_key(gb, key), None, wait=False)
        last = self.writer.meta(b"G" + ob + gb, None, wait=False)
        if self.orgs_of(group) <= {org, -1}:  # no other org's group of that name
            last = self.writer.meta(b"g" + gb, None, wait=False)
        self.state.wait_meta(last)
        return True

    def groups(self, org: int) -> list[str]:
        with self.state.lock:
            names = set(self.cursors) | set(self.group_orgs)
        return sorted(g for g in names if self.has_group(org, g))

    def create_group(self, org: int, group: str) -> None:
        gb = topic_bytes(group)
        if org not in self.orgs_of(group):
            self.writer.meta(b"G" + org_bytes(org) + gb, b"")

    def forget_stream(self, key: bytes) -> None:
        """Tombstones for every cursor of a stream about to be deleted (not waited for: the
        delete mark that follows is, and the replay drops them with the stream anyway)."""
        for g, cur in list(self.cursors.items()):
            if key in cur:
                self.writer.meta(cursor_key(g.encode(), key), None, wait=False)
