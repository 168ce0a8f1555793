"""Where a batch write's task spends its time (option "walfs.bench.phases" = a file): each
task adds one JSON line to the file when it ends, with the wall-clock start and end of
the task (time.time(), to see tasks overlap) and the seconds spent in each phase.
bench/bench_spark_sink.py --phases prints them; nothing is timed without the option.

Phases: `feed` (waiting for Spark's next Arrow batch: the JVM's side), `normalize`
(checking and normalizing a batch's columns), `encode` (building the stored layout of a
chunk), `lock` (with a path: waiting for the data directory's lock and opening it),
`append` (the engine's append, or building and sending a Produce request), `wait`
(through a daemon: waiting for a Produce's answer), `sync` and `close`. With a path,
`lock`, `append`, `sync` and `close` are the task's appender thread's (they overlap the
task's own phases) and two more are the task's thread's: `backlog` (waiting while
sink_task.TASK_BUFFER_BYTES are queued for the appender) and `drain` (at the input's
end, waiting for the appender's last turn).
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
        with open(self.where, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
