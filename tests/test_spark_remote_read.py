"""Remote reads (option "bootstrap") without Spark: walfs.spark.remote_read against a real
`walfs serve`, with small Fetch answers so that a range takes many of them and the next
Fetch is always sent ahead (RemoteWal.fetch_ahead) while one is decoded."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from kafka_harness import ServeProcess

import walfs
from walfs.spark.remote import RemoteError, RemoteWal
from walfs.spark.remote_read import read_remote, read_remote_range


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[walfs.Record]]]:
    data = tmp_path_factory.mktemp("remote-read") / "data"
    rng = random.Random(9)
    with walfs.Wal(data) as wal:
        for i in range(40):  # batches of plain values, and records with keys and headers
            wal.append("t", [rng.randbytes(rng.randrange(200)) for _ in range(50)])
            wal.append("t", b"keyed %d" % i, key=b"k%d" % i, headers=[("h", b"v"), ("n", None)])
        records = wal.read_records("t", 0, 0, 10_000)
    serve = ServeProcess(data)
    yield serve.bootstrap, records
    rc, err = serve.stop()
    assert rc == 0, err


def rows(batches: object) -> list[tuple[int, bytes | None, bytes, list[tuple[str, bytes | None]]]]:
    return [
        (r["offset"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
        for b in batches  # type: ignore[attr-defined]
        for r in b.to_pylist()
    ]


def expected(
    records: list[walfs.Record], start: int, end: int
) -> list[tuple[int, bytes | None, bytes, list]]:
    return [(r.offset, r.key, r.value, list(r.headers)) for r in records[start:end]]


@pytest.mark.parametrize(("start", "end"), [(0, 2040), (17, 1999), (1000, 1001), (2039, 2040)])
def test_a_range_read_in_many_small_fetches_is_every_record_once(
    served: tuple[str, list[walfs.Record]], start: int, end: int
) -> None:
    bootstrap, records = served
    assert len(records) == 2040
    got = rows(read_remote_range(bootstrap, "t", 0, start, end, max_bytes=3000))
    assert got == expected(records, start, end)


def test_a_read_stopped_early_leaves_the_connection_usable(served: tuple[str, list[walfs.Record]]) -> None:
    """Spark may stop a task's iterator; the Fetch sent ahead is then read and dropped, so
    the connection answers the next request (the sink scans with its own connection)."""
    bootstrap, records = served
    with RemoteWal(bootstrap) as remote:
        it = read_remote(remote, "t", 0, 0, 2040, max_bytes=3000)
        first = next(it)
        assert first.num_rows < 2040
        it.close()
        assert remote.topics() == {"t": 1}
        assert rows(read_remote(remote, "t", 0, 5, 900, max_bytes=3000)) == expected(records, 5, 900)
        ahead = remote.fetch_ahead("t", 0, 0)
        with pytest.raises(RemoteError, match="sent ahead"):
            remote.topics()  # one request at a time: the answer sent ahead comes first
        assert remote.fetch_result(ahead)
        assert remote.topics() == {"t": 1}
