"""The daemon life both `walfs mount` and `walfs serve` live (walfs/service/lifecycle.py):
the order things close in, and the exit status of a failed engine. The daemons themselves
are exercised end to end by tests/test_mount_service.py and the `walfs serve` tests."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from walfs.service import lifecycle


class FakeWal:
    def __init__(self, order: list[str], failed: bool = False, close_error: bool = False) -> None:
        self.order, self.failed, self.close_error = order, failed, close_error

    def close(self) -> None:
        self.order.append("wal")
        if self.close_error:
            raise OSError(5, "closing a failed WAL")


class FakeMetrics:
    def __init__(self, order: list[str]) -> None:
        self.order = order

    def close(self) -> None:
        self.order.append("metrics")


def test_everything_closes_in_order_even_after_a_failure(tmp_path: Path) -> None:
    order: list[str] = []
    wal: Any = FakeWal(order)
    metrics: Any = FakeMetrics(order)
    with pytest.raises(RuntimeError), lifecycle.running(wal, str(tmp_path), metrics) as service:
        assert service.local is not None and os.path.exists(tmp_path / "kafka.sock")
        service.closing.append(lambda: order.append("face") or None)
        raise RuntimeError("the face failed")
    assert order == ["face", "metrics", "wal"]
    assert not os.path.exists(tmp_path / "kafka.sock")
    assert service.exit_status == 0


def test_a_failed_engine_exits_75_and_its_close_error_is_only_logged(tmp_path: Path) -> None:
    order: list[str] = []
    wal: Any = FakeWal(order, failed=True, close_error=True)
    metrics: Any = FakeMetrics(order)
    with lifecycle.running(wal, str(tmp_path), metrics) as service:
        pass
    assert service.exit_status == lifecycle.EXIT_WAL_FAILED == 75
    assert order == ["metrics", "wal"]


def test_supervise_stops_on_a_signal_and_on_a_failed_engine() -> None:
    order: list[str] = []
    seen: list[signal.Signals] = []

    async def main(wal: Any, send: bool) -> None:
        metrics: Any = FakeMetrics(order)
        service = lifecycle.Service(wal, metrics)
        async with trio.open_nursery() as nursery:
            await lifecycle.supervise(nursery, service, nursery.cancel_scope.cancel, seen.append)
            if send:
                os.kill(os.getpid(), signal.SIGTERM)  # the receiver is open: a clean stop
                while not seen:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
            else:
                wal.failed = True  # the watch stops the nursery by itself

    trio.run(main, FakeWal(order), True)
    assert seen == [signal.SIGTERM]
    trio.run(main, FakeWal(order), False)
