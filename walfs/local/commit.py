"""The one commit rule of the local engine (LogEngine.commit): a cursor is committed only
inside its stream's offsets, and only once the records before it are durable (a commit past
the durable mark syncs first), so nothing a power cut can take back is ever committed. The
cursor store (LocalEngine.cursors) keeps what it is given; this is the only path to it. At
a writer's open, cursors past their stream's end are set back (clamp)."""

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from walfs.engine.names import check_partition, stream_key, topic_hash
from walfs.errors import OffsetOutOfRangeError, WalCorruptError
from walfs.local.core import Engine
from walfs.local.cursors import metadata_bytes
from walfs.local.topic_index import Stream

log = logging.getLogger("walfs")


class Cursors(Protocol):
    """What the rule uses of the cursor store (LocalEngine.cursors)."""

    def get(self, group: str, key: str) -> int | None: ...

    def put(
        self, group: str, key: str, offset: int, *, advance_only: bool = ..., metadata: str = ...
    ) -> bool: ...

    def put_many(
        self, group: str, items: list[tuple[str, int, str]], *, advance_only: bool = ...
    ) -> list[bool]: ...

    def groups(self, org_id: int | None = None) -> list[str]: ...

    def keys(self, group: str) -> Iterable[str]: ...


def cursor_key(org_id: int, topic: str, partition: int) -> str:
    """The cursor store's key of a stream of org_id."""
    return stream_key(org_id, topic_hash(org_id, topic), check_partition(partition))


class CommitRule:
    def __init__(self, core: Engine, cursors: Cursors) -> None:
        self._core = core
        self._cursors = cursors

    def commit(
        self,
        find: Callable[[str, int, bool], Stream | None],
        org_id: int,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        advance_only: bool,
        metadata: str,
    ) -> bool:
        """LogEngine.commit on the engine (org view) whose stream look-up is `find`."""
        if not isinstance(offset, int) or offset < 0:
            raise OffsetOutOfRangeError(f"cannot commit offset {offset!r} of {topic!r}[{partition}]")
        s = find(topic, partition, False)
        high, durable = self._core.marks(s.stream_no)[1:3] if s else (0, 0)
        if offset > high:
            raise OffsetOutOfRangeError(
                f"cannot commit offset {offset} of {topic!r}[{partition}]: the end is {high}"
            )
        if offset > durable:
            self._core.sync()
        return self._cursors.put(
            group, cursor_key(org_id, topic, partition), offset, advance_only=advance_only, metadata=metadata
        )

    def commit_many(
        self,
        find: Callable[[str, int, bool], Stream | None],
        org_id: int,
        group: str,
        entries: Sequence[tuple[str, int, int, str]],
        advance_only: bool,
    ) -> list[bool | Exception]:
        """CommitMany.commit_many: the rule of commit() for each (topic, partition, offset,
        metadata), with one sync for all that need one and one store write for all."""
        out: list[bool | Exception] = []
        ok: list[tuple[int, tuple[str, int, str]]] = []
        need_sync = False
        for k, (topic, partition, offset, metadata) in enumerate(entries):
            try:
                if not isinstance(offset, int) or offset < 0:
                    raise OffsetOutOfRangeError(f"cannot commit offset {offset!r} of {topic!r}[{partition}]")
                metadata_bytes(metadata)
                s = find(topic, partition, False)
                high, durable = self._core.marks(s.stream_no)[1:3] if s else (0, 0)
                if offset > high:
                    raise OffsetOutOfRangeError(
                        f"cannot commit offset {offset} of {topic!r}[{partition}]: the end is {high}"
                    )
                need_sync = need_sync or offset > durable
                ok.append((k, (cursor_key(org_id, topic, partition), offset, metadata)))
                out.append(False)
            except Exception as e:
                out.append(e)
        if need_sync:
            self._core.sync()
        if ok:
            for (k, _item), changed in zip(
                ok,
                self._cursors.put_many(group, [item for _k, item in ok], advance_only=advance_only),
                strict=True,
            ):
                out[k] = changed
        return out

    def clamp(self, streams: Iterable[Stream]) -> None:
        """A cursor past its stream's end (the log lost its tail: a power cut under an
        older release, a restored backup) would make the group skip the records that reuse
        those offsets. It is set back to the end, and logged."""
        cursors = self._cursors
        groups = cursors.groups()
        if not groups:
            return  # no cursor: nothing to look up (an open of 100,000 streams skips the pass)
        by_key = {stream_key(s.org_id, s.topic_hash, s.partition): s for s in streams}
        ends: dict[str, tuple[Stream, int]] = {}
        for group in groups:
            for key in cursors.keys(group):
                s = by_key.get(key)
                if s is not None and key not in ends:  # the ends of the streams with cursors only
                    ends[key] = (s, self._core.marks(s.stream_no)[1])
                try:
                    offset = cursors.get(group, key)
                except WalCorruptError as e:
                    log.error("%s", e)
                    continue
                s_end = ends.get(key)
                end = s_end[1] if s_end else 0
                if offset is not None and offset > end:
                    name = f"{s_end[0].name!r}[{s_end[0].partition}]" if s_end else key
                    log.warning(
                        "cursor of group %r on %s was past the end (%d > %d): set back to %d",
                        group,
                        name,
                        offset,
                        end,
                        end,
                    )
                    cursors.put(group, key, end)
