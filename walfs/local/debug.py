"""Calls that exist only for tests and torture runs, kept off the public face (walfs.Wal
and the engine interface): simulated power loss and injected I/O faults of the local
engine. They take a walfs.Wal or a LocalEngine."""

from typing import Any

from walfs.local.engine import LocalEngine


def local_engine(wal: Any) -> LocalEngine:
    """The LocalEngine behind a Wal (or the engine itself); TypeError for another engine."""
    engine = getattr(wal, "engine", wal)
    if not isinstance(engine, LocalEngine):
        raise TypeError(f"{type(engine).__name__} is not the local engine")
    return engine


def power_cut(wal: Any, seed: int, keep_permille: int = 0) -> None:
    """Test mode only (opened with test_mode=True): simulates power loss. Every page written
    since its file's last sync reverts (except keep_permille/1000 of them, chosen by seed),
    and the WAL is abandoned without syncing or closing cleanly."""
    engine = local_engine(wal)
    engine.stop_background()
    engine.core.power_cut(seed, keep_permille)


def inject_fault(wal: Any, op: str, err: int, after: int = 0, count: int = -1) -> None:
    """Makes the core's next `op` ("write", "sync", "alloc", "reclaim" or "writeback")
    calls fail with errno `err`: after `after` good ones, `count` times (-1: for ever).
    "catalog_split": a crash between the catalog copies' writes (the append writes and
    syncs streams.cat, not its mirror, and fails the WAL: power_cut it next)."""
    local_engine(wal).core.inject_fault(op, err, after, count)


def slow_sync(wal: Any, ms: int) -> None:
    """A slow disk: the core's next sync round that has files to sync sleeps `ms`
    milliseconds before it syncs them (once)."""
    local_engine(wal).core.slow_sync(ms)


def writeback_wait(wal: Any) -> dict[str, int]:
    """Waits until the core's writeback thread (csrc/writeback.c) has written back every
    range appends handed to it so far; its counts since open: queued, refused, done,
    failed, max_queue_ns (the longest an appending thread spent handing a range over)."""
    return local_engine(wal).core.writeback_wait()
