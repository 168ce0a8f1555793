"""When a produce's answer leaves relative to durability (walfs/kafka/group_sync.py,
Broker.answer_syncs; docs/kafka.md "Durability", docs/durability.md).

- The syncs run one at a time in a chain: what is appended while one runs (on any
  connection, its answer owed behind an earlier one or not) is covered by the next, called
  as soon as the running one returns, not when the answer before it has been sent, and
  not by a call made before those appends. The WAL's sync is held on a gate
  (test_kafka_pipeline.GatedWal), so this is seen without any timing.
- What an answer promises, through a power cut (the core's test mode puts back every page
  written since its file's last sync): under "always" every answered record (acks=all
  and acks=1) survives; under "interval" an acks=all answer means its records and every
  record appended before them survive, an acks=1 answer only that they are in the log
  (they survive SIGKILL, tests/test_kafka_crash.py, and a power cut only once a later
  sync round covered them)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import trio
from kafka_harness import SMALL_WAL, Listener, raw_connect, recv_frame, wait_until
from test_kafka_pipeline import (
    SYNCING_WALS,
    GatedWal,
    gated,  # noqa: F401 (the fixture: a listener on a WAL whose syncs wait at a gate)
    nothing_to_read,
    produce,
    produce_answer,
)

import walfs
from walfs.errors import WalIOError
from walfs.kafka.group_sync import GroupSync
from walfs.local import debug


def test_what_is_appended_while_a_sync_runs_is_covered_by_the_next_one(
    gated: tuple[GatedWal, Listener],  # noqa: F811
) -> None:
    wal, lst = gated
    with raw_connect(lst.port) as s, raw_connect(lst.port) as s2:
        s.sendall(produce("t", 5, 1))
        wait_until(lambda: wal.waiting == 1, 30, "the first request's sync")
        # Appended while that sync runs, on the same connection (its answer owed behind the
        # first) and on another: no second sync is called while the first is held.
        s.sendall(produce("t", 3, 2))
        s2.sendall(produce("t", 2, 3))
        wait_until(lambda: wal.info("t").high_watermark == 10, 30, "the later appends")
        assert wal.calls == 1
        assert nothing_to_read(s) and nothing_to_read(s2)  # no answer before its records are durable
        assert wal.info("t").durable_watermark == 0
        wal.gate.set()
        answers = [produce_answer(recv_frame(s)) for _ in range(2)] + [produce_answer(recv_frame(s2))]
    assert sorted(answers) == [(1, 0, 0), (2, 0, 5), (3, 0, 8)] or sorted(answers) == [
        (1, 0, 0),
        (2, 0, 7),
        (3, 0, 5),
    ]
    # The held sync, then one more for both later requests, called when it returned.
    assert wal.calls == 2
    assert wal.info("t").durable_watermark == 10


@pytest.mark.parametrize("fails", [False, True], ids=["next-sync-ok", "next-sync-eio"])
def test_an_answer_waits_for_a_sync_called_after_its_append(tmp_path: Path, fails: bool) -> None:
    wal = GatedWal(str(tmp_path / "data"), sync_first=True, fsync="always", **SMALL_WAL)
    try:
        with Listener(wal) as lst, raw_connect(lst.port) as s, raw_connect(lst.port) as s2:
            s.sendall(produce("t", 5, 1))
            wait_until(lambda: wal.waiting == 1, 30, "the first sync, done and held")
            assert wal.info("t").durable_watermark == 5
            # Appended after that sync read what it covers: on the same connection and on
            # another one.
            s.sendall(produce("t", 3, 2))
            s2.sendall(produce("t", 2, 3))
            wait_until(lambda: wal.info("t").high_watermark == 10, 30, "the later appends")
            assert wal.info("t").durable_watermark == 5  # in the page cache only
            if fails:
                debug.inject_fault(wal, "sync", errno.EIO)
            wal.release.release()  # the first sync returns: only its own answer may go
            assert produce_answer(recv_frame(s)) == (1, 0, 0)
            # The chain calls the next sync at once; until it returns, neither later
            # answer is sent, though the first sync has returned.
            wait_until(lambda: wal.calls == 2 and wal.waiting == 1, 30, "the next sync, held")
            assert nothing_to_read(s) and nothing_to_read(s2)
            assert wal.info("t").durable_watermark == (5 if fails else 10)
            wal.release.release()
            later = [produce_answer(recv_frame(s)), produce_answer(recv_frame(s2))]
            if fails:
                # KAFKA_STORAGE_ERROR (56), no offset: nothing acknowledged as durable.
                assert [a[:2] for a in later] == [(2, 56), (3, 56)]
                assert [a[2] for a in later] == [-1, -1]
            else:
                assert [a[:2] for a in later] == [(2, 0), (3, 0)]
                assert sorted(a[2] for a in later) in ([5, 7], [5, 8])
            assert wal.calls == 2
    finally:
        for _ in range(4):
            wal.release.release()
        if fails:
            with pytest.raises(WalIOError):  # a failed WAL reports it at close too
                wal.close()
        else:
            wal.close()


def send_all(port: int, requests: list[bytes], connections: int = 1) -> list[tuple[int, int, int]]:
    """Sends the requests pipelined over ``connections`` connections at once (request k on
    connection k % connections) and reads every answer, in request order per connection."""
    socks = [raw_connect(port) for _ in range(connections)]
    try:
        for i, s in enumerate(socks):
            s.sendall(b"".join(requests[i::connections]))
        answers = {
            i: [produce_answer(recv_frame(s)) for _ in requests[i::connections]] for i, s in enumerate(socks)
        }
    finally:
        for s in socks:
            s.close()
    return [answers[k % connections][k // connections] for k in range(len(requests))]


def values(cid: int, n: int) -> list[bytes]:
    return [b"r%d-%d" % (cid, i) for i in range(n)]


def reopen(path: Path, policy: dict[str, object]) -> walfs.Wal:
    return walfs.Wal(str(path), test_mode=True, **policy)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("policy", "acks"),
    [("always", -1), ("always", 1), ("interval", -1)],
    ids=["always-all", "always-1", "interval-all"],
)
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("connections", [1, 4])
def test_every_answered_record_survives_a_power_cut(
    tmp_path: Path, policy: str, acks: int, seed: int, connections: int
) -> None:
    conf = SYNCING_WALS[policy]
    wal = reopen(tmp_path / "data", conf)
    expect: list[bytes] = []
    for cycle in range(3):
        sizes = [1 + (seed * 7 + cycle * 3 + k) % 5 for k in range(12)]
        with Listener(wal) as lst:
            cid = 100 * cycle
            answers = send_all(
                lst.port, [produce("t", n, cid + k, acks=acks) for k, n in enumerate(sizes)], connections
            )
        assert [code for _, code, _ in answers] == [0] * len(sizes)
        # In the log in the order of the base offsets (connections interleave).
        for base, k in sorted((a[2], k) for k, a in enumerate(answers)):
            assert base == len(expect)
            expect += values(cid + k, sizes[k])
        # Nothing synced after the answers: every page written since the last sync reverts.
        debug.power_cut(wal, seed=seed * 10 + cycle, keep_permille=0)
        wal = reopen(tmp_path / "data", conf)
        assert wal.info("t").high_watermark == len(expect)
        assert wal.read("t", 0, max_records=len(expect) + 10) == expect
    wal.close()


def test_under_interval_an_acks_1_answer_survives_a_power_cut_once_a_later_round_covers_it(
    tmp_path: Path,
) -> None:
    # An interval syncer that never comes during the test: only the listener's rounds sync.
    conf = {"fsync": "interval", "fsync_interval_ms": 3_600_000, **SMALL_WAL}
    wal = reopen(tmp_path / "data", conf)
    with Listener(wal) as lst, raw_connect(lst.port) as s:
        # One after the other: the acks=1 append comes after the acks=all answer's round
        # has ended (a round still starting when it came would cover it as well).
        s.sendall(produce("t", 3, 1))
        assert produce_answer(recv_frame(s)) == (1, 0, 0)
        s.sendall(produce("t", 2, 2, acks=1))
        assert produce_answer(recv_frame(s)) == (2, 0, 3)
    debug.power_cut(wal, seed=5, keep_permille=0)
    wal = reopen(tmp_path / "data", conf)
    # The acks=all records are durable; the acks=1 records after them were in the page
    # cache only, and no round came after them.
    assert wal.read("t", 0, max_records=10) == values(1, 3)
    with Listener(wal) as lst:
        answers = send_all(lst.port, [produce("t", 2, 3, acks=1), produce("t", 1, 4)])
    assert answers == [(3, 0, 3), (4, 0, 5)]
    debug.power_cut(wal, seed=6, keep_permille=0)
    wal = reopen(tmp_path / "data", conf)
    # The acks=all answer's round covered the acks=1 records appended before it.
    assert wal.read("t", 0, max_records=10) == values(1, 3) + values(3, 2) + values(4, 1)
    wal.close()


def test_a_chain_cancelled_before_its_thread_ran_does_not_hold_later_marks(tmp_path: Path) -> None:
    # The listener's nursery cancelled (its shutdown) while a chain waited for a worker
    # thread: the next mark, in a new nursery, still gets its sync.
    wal = walfs.Wal(str(tmp_path / "data"), fsync="always", **SMALL_WAL)
    wal.append("t", [b"a"])
    limiter = trio.CapacityLimiter(1)
    gs = GroupSync(wal.engine.sync, limiter)

    async def main() -> None:
        await limiter.acquire()  # every worker thread taken: the chain waits for one
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                gs.nursery = nursery
                gs.mark()
                await trio.sleep(0.05)
                assert gs.rounds == 0
                scope.cancel()
        limiter.release()
        async with trio.open_nursery() as nursery:
            gs.nursery = nursery
            with trio.fail_after(30):
                await gs.wait(gs.mark())
        assert gs.rounds == 1

    trio.run(main)
    wal.close()
