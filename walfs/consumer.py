"""Consumers: a group's cursor on one stream, read and committed through the engine
interface alone (walfs.engine.contract.LogEngine: committed, commit, read; each engine
stores cursors its own way, the local engine in walfs/local/cursors.py)."""

from walfs.engine.contract import LogEngine
from walfs.engine.names import topic_bytes
from walfs.engine.records import Record
from walfs.engine.rules import committed_offset, durable_end, group_start, read_records


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
        self.committed = committed_offset(engine, group, topic, partition)
        self.position = group_start(engine, group, topic, partition)

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
