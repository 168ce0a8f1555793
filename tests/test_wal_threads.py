"""Concurrency: writers on threads (one stream each, or all on one), group commit, readers
during appends. The GIL is released in C, so these really run in parallel."""

import threading

from conftest import payload

import walfs


def run_threads(n: int, target) -> None:
    errors: list[BaseException] = []

    def wrap(i: int) -> None:
        try:
            target(i)
        except BaseException as e:  # surfaced below: a thread's failure fails the test
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_interleaved_writers_on_their_own_streams(open_wal):
    w = open_wal(fsync="never")

    def writer(i: int) -> None:
        t = f"thread-{i}"
        for k in range(0, 3000, 30):
            assert w.append(t, [payload(t, k + j) for j in range(30)]) == k

    run_threads(8, writer)
    w.close()
    w = open_wal()
    for i in range(8):
        t = f"thread-{i}"
        assert w.read(t, 0, max_records=5000, max_bytes=1 << 30) == [payload(t, k) for k in range(3000)]


def test_many_writers_on_one_stream_never_tear_batches(open_wal):
    w = open_wal(fsync="never")
    firsts: dict[int, list[int]] = {}

    def writer(i: int) -> None:
        firsts[i] = [w.append("shared", [b"%d:%d" % (i, j) for j in range(7)]) for _ in range(200)]

    run_threads(6, writer)
    assert w.info("shared").high_watermark == 6 * 200 * 7
    got = w.read("shared", 0, max_records=10_000)
    for i, offsets in firsts.items():
        for off in offsets:  # every batch is contiguous and in order
            assert got[off : off + 7] == [b"%d:%d" % (i, j) for j in range(7)]
    gids = [r.gid for r in w.read_records("shared", 0, max_records=10_000)]
    assert gids == sorted(gids)


def test_group_commit_with_sixteen_always_writers(open_wal):
    w = open_wal(fsync="always")

    def writer(i: int) -> None:
        for k in range(40):
            assert w.append(f"g{i % 4}", b"%d-%d" % (i, k)) >= 0

    run_threads(16, writer)
    assert sum(w.info(f"g{i}").high_watermark for i in range(4)) == 16 * 40
    w.close()
    w = open_wal()
    assert sum(w.info(f"g{i}").high_watermark for i in range(4)) == 16 * 40


def test_readers_see_only_whole_records_while_writers_append(open_wal):
    w = open_wal(fsync="never")
    stop = threading.Event()
    seen: list[int] = []

    def reader(_i: int) -> None:
        while not stop.is_set():
            hwm = w.info("r").high_watermark
            if hwm:
                vals = w.read("r", 0, max_records=hwm)
                assert vals == [payload("r", k) for k in range(len(vals))]
                data = w.read_bytes("r", 0, w.info("r").byte_size)
                assert data.endswith(b"\n") and data.count(b"\n") >= hwm
                seen.append(len(vals))

    t = threading.Thread(target=run_threads, args=(2, reader))
    t.start()
    for k in range(0, 2000, 20):
        w.append("r", [payload("r", k + j) for j in range(20)])
    stop.set()
    t.join()
    assert seen


def test_concurrent_stream_creation(open_wal):
    w = open_wal()
    run_threads(8, lambda i: [w.append(f"new-{k}", b"%d" % i) for k in range(50)])
    assert len(w.topics()) == 50
    assert all(w.info(f"new-{k}").high_watermark == 8 for k in range(50))


def test_two_wals_append_in_parallel(tmp_path):
    from conftest import SMALL

    wals = [walfs.Wal(tmp_path / f"w{i}", fsync="always", **SMALL) for i in range(2)]
    run_threads(2, lambda i: [wals[i].append("t", b"x") for _ in range(100)])
    assert [x.info("t").high_watermark for x in wals] == [100, 100]
    for x in wals:
        x.close()
