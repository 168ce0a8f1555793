"""Where a batch write's task spends its time (option "walfs.bench.phases" = a file): each
task adds one JSON line to the file when it ends, with the wall-clock start and end of
the task (time.time(), to see tasks overlap) and the seconds spent in each phase.
bench/spark/bench_spark_sink.py --phases prints them; nothing is timed without the option.

Phases: `feed` (waiting for Spark's next Arrow batch: the JVM's side), `normalize`
(checking and normalizing a batch's columns), `encode` (building the stored layout of a
chunk), `lock` (with a path: waiting for the data directory's lock and opening it),
`append` (the engine's append, or building and sending a Produce request), `wait`
(through a daemon: waiting for a Produce's answer), `sync` and `close`. With a path,
`lock`, `append`, `sync` and `close` are the task's appender thread's (they overlap the
task's own phases) and two more are the task's thread's: `backlog` (waiting while
sink_task.TASK_BUFFER_BYTES are queued for the appender) and `drain` (at the input's
end, waiting for the appender's last turn). With a path the line also lists the task's
`turns` (Phases.turn): when each asked for the data directory's lock, got it and released
it, what its open took, its MiB and its sync.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    def __init__(self, where: str | None, task: str) -> None:
        self.where = where
        self.task = task
        self.start = time.time()
        self.spent: dict[str, float] = {}
        self.lock = threading.Lock()  # a task's appender thread times its phases too
        self.turns: list[dict[str, float]] = []

    def turn(self, asked: float, got: float, released: float, waited: float, **more: float) -> None:
        """Notes one turn of the task's appender (with a path): when it asked for the data
        directory's lock, got it (opened the directory) and released it (closed it), all
        time.time(); how long of the asking it paused for another holder (the rest is
        the open's own); and `more` (the turn's MiB and sync seconds)."""
        if self.where is None:
            return
        turn = {"asked": asked, "got": got, "released": released, "open": got - asked - waited, **more}
        with self.lock:
            self.turns.append({k: round(v, 4) for k, v in turn.items()})

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        if self.where is None:
            yield
            return
        t = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - t
            with self.lock:
                self.spent[phase] = self.spent.get(phase, 0.0) + took

    def done(self, **extra: object) -> None:
        if self.where is None:
            return
        line = {"task": self.task, "pid": os.getpid(), "start": self.start, "end": time.time()}
        line.update({k: round(v, 4) for k, v in self.spent.items()})
        line.update(extra)
        if self.turns:
            line["turns"] = self.turns
        with open(self.where, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
