"""Every engine call that takes a caller's buffer releases it before an error leaves the
call (walfs/local/core.py, the rule at its top).

The crash this guards against: a cffi buffer over a caller's memoryview, left alive in a
frame that the error's traceback keeps, holds an export of that memoryview. When the
cyclic garbage collector breaks the traceback's cycle, CPython 3.11 clears the memoryview
despite the export and later frees it twice: a segfault in `memory_dealloc`. The mount
daemon died of it once in CI, when a page push read bytes that a trim had just cut
(walfs/fuse/page_push.py). Each call runs in a child process: the old code dies there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Each snippet makes one call fail with a memoryview of a bytearray as its buffer (the
# failures come from C, after the buffer was handed over), keeps the error in a reference
# cycle the way trio and logging keep them, then runs the garbage collector.
SETUP = """
import array, gc, sys
import walfs
from walfs.local.core import REC_SIZE
from walfs.wire.batch_codec import encode_kafka_batch
w = walfs.Wal(sys.argv[1], fsync="never", segment_size=1 << 20, block_size=64 << 10)
w.append("t", [b"x" * 4000 + b"\\n" for _ in range(50)])
w.trim("t", 40)
e = w.engine.core
stream = w.engine._stream("t", 0, False).stream_no
BAD = 1 << 30  # no such stream
buf = bytearray(8192)
recs = bytearray(4 * REC_SIZE)
"""

CALLS = {
    "read_bytes_into (trimmed)": "e.read_bytes_into(stream, 0, view, len(view))",
    "read_bytes_into (no stream)": "e.read_bytes_into(BAD, 0, view, len(view))",
    "read_into": "e.read_into(BAD, 0, view, memoryview(recs)[:], 4, len(view))",
    "append": "e.append(BAD, view, array.array('I', [0]), array.array('I', [len(view)]))",
    "append_nowait": "e.append_nowait(BAD, view, array.array('I', [0]), array.array('I', [len(view)]))",
    "append_pieces": (
        "e.append_pieces(BAD, [b'ab', view], array.array('I', [0]), array.array('I', [len(view) + 2]))"
    ),
    "append_one": "e.append_one(BAD, view, False)",
    "append_lines": "e.append_lines(BAD, view)",
    # A descriptor pointing at a meta section that does not parse.
    "encode_kafka_batch": (
        "memoryview(recs).cast('Q')[:5] = array.array('Q', [0, 0, 0, 7, 0]); "
        "encode_kafka_batch(view, memoryview(recs)[:], 1)"
    ),
}

RUN = """
def fail():
    view = memoryview(buf)[:]
    try:
        {call}
    except Exception as exc:
        err = exc  # err -> traceback -> this frame -> err: a cycle
        return type(exc).__name__
    return None

name = fail()
assert name is not None, "the call did not fail"
collected = gc.collect()
print("survived", name, collected)
"""


@pytest.mark.parametrize("call", list(CALLS))
def test_an_error_with_a_callers_memoryview_survives_the_garbage_collector(tmp_path: Path, call: str) -> None:
    script = textwrap.dedent(SETUP) + textwrap.dedent(RUN).format(call=CALLS[call])
    res = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "d")], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr[-2000:]}"
    assert res.stdout.startswith("survived "), res.stdout
