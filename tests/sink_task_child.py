"""A batch write's task in a process of its own, for the SIGKILL tests of
tests/test_spark_sink_task.py: runs WalfsBatchWriter.write_task (the writer unpickled, as
Spark ships it to its tasks) over 48 Arrow batches of 1 KiB rows whose values start with
LETTER, with the hold, the turns and what it queues for its appender thread lowered to
one chunk. Prints "batch K" before it hands over batch K; at batch PAUSE_AT (-1: none),
once a turn of its appender thread has ended, it prints "paused" and
sleeps, waiting to be killed; at its end it prints the streams it reports to the driver
as JSON.

usage: sink_task_child.py WRITER_PICKLE PARTITION ATTEMPT LETTER PAUSE_AT"""

import json
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pyarrow as pa

from walfs.spark import sink_task

BATCHES = 48
BATCH_ROWS = 1024
SCHEMA = pa.schema([("topic", pa.string()), ("value", pa.binary())])
FILL = bytes(range(256)) * 4


def value(letter: str, i: int) -> bytes:
    return letter.encode() + b"%011d" % i + FILL[12:]


IDLE = threading.Event()


def telling_turns(idle: threading.Event, emptied: bool = True) -> Callable[[sink_task._LocalOutlet], None]:
    """sink_task._LocalOutlet._turn, setting `idle` after each turn; with `emptied`, only
    after one that leaves nothing queued (the appender thread then waits until its task
    queues more)."""
    turn = sink_task._LocalOutlet._turn

    def turn_then_tell(self: sink_task._LocalOutlet) -> None:
        turn(self)
        with self.cond:
            if not (emptied and self.queue):
                idle.set()

    return turn_then_tell


def rows(letter: str, pause_at: int) -> Iterator[pa.RecordBatch]:
    for k in range(BATCHES):
        print(f"batch {k}", flush=True)
        if k == pause_at:
            # a turn done (the held chunks'), and none due until it queues more: the lock free
            IDLE.wait(60)
            print("paused", flush=True)
            time.sleep(600)
        values = pa.array([value(letter, i) for i in range(k * BATCH_ROWS, (k + 1) * BATCH_ROWS)])
        yield pa.record_batch([pa.array(["t"] * BATCH_ROWS), values], schema=SCHEMA)


def main() -> None:
    blob, part, attempt, letter, pause_at = sys.argv[1:6]
    sink_task.TASK_HOLD_BYTES = sink_task.TASK_CHUNK_BYTES
    sink_task.TASK_TURN_BYTES = sink_task.TASK_CHUNK_BYTES
    sink_task.TASK_BUFFER_BYTES = sink_task.TASK_CHUNK_BYTES  # waits for its appends past 1 chunk
    sink_task._LocalOutlet._turn = telling_turns(IDLE, emptied=False)  # type: ignore[method-assign]
    with open(blob, "rb") as f:
        writer = pickle.load(f)
    done = writer.write_task(int(part), int(attempt), rows(letter, int(pause_at)))
    print(json.dumps(done.streams), flush=True)


if __name__ == "__main__":
    main()
