"""Line assembly: bytes written in arbitrary pieces become one record per line.

Whoever takes a byte stream of newline-terminated lines (the mount's writers, a Python
caller piping a file in) cuts it the same way, here: each complete line is one record;
the bytes after the last newline are held until their newline arrives or the writer is
done (`pending_record`: the held line becomes a record as it stands). A writer that
never sends a newline is held at `max_line_bytes`, then refused (RecordTooLargeError),
and every later piece is refused too, so that no tail of that line is ever stored as a
record of its own.

Two steps per piece, so that a failed append keeps nothing: `complete_lines(buf)` gives
the complete lines to append as one batch (the held partial joined with the piece's
lines), or None when the piece ends no line (then it is held already); once the batch
is appended, `appended(buf)` keeps what follows the last newline. The joined lines go
through one buffer reused across pieces: a stream of 1 MiB pieces that end mid-line (dd
bs=1M) costs one memcpy per piece, not an allocation and a realloc.
"""

from __future__ import annotations

from walfs.errors import RecordTooLargeError

# The longest line (one record) a writer may make by default.
DEFAULT_MAX_LINE_BYTES = 16 << 20


class LineAssembler:
    """The held partial line of one writer (not thread-safe: one writer's pieces)."""

    __slots__ = ("max_line_bytes", "partial", "refused", "_scratch")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.partial = bytearray()
        # A line passed max_line_bytes: every later piece is refused.
        self.refused = False
        self._scratch: bytearray | None = None

    def complete_lines(self, buf: bytes) -> bytes | memoryview | None:
        """The lines `buf` completes (held partial first), newline-terminated, as one
        batch to append; None if `buf` ends no line (it is held). Raises
        RecordTooLargeError when the line under way passes max_line_bytes (the held
        bytes are dropped and the writer is refused from then on). The view returned is
        valid until the next call."""
        if self.refused:
            raise RecordTooLargeError(f"a line passed {self.max_line_bytes} bytes earlier")
        newline = buf.find(b"\n")
        # Only the line that continues the held partial one can pass the limit when a
        # piece is at most max_line_bytes; longer pieces are checked whole.
        if len(self.partial) + (len(buf) if newline < 0 else newline) > self.max_line_bytes:
            held = len(self.partial)
            self.partial = bytearray()
            self._scratch = None
            self.refused = True
            raise RecordTooLargeError(
                f"a line passed {self.max_line_bytes} bytes: refused, {held} held bytes dropped"
            )
        if newline < 0:
            self.partial += buf
            return None
        end = buf.rfind(b"\n") + 1
        if not self.partial:
            return buf if end == len(buf) else memoryview(buf)[:end]
        held = len(self.partial)
        need = held + end
        if self._scratch is None or len(self._scratch) < need:
            self._scratch = bytearray(max(need, 2 * len(self._scratch or b"")))
        joined = memoryview(self._scratch)
        joined[:held] = self.partial
        joined[held:need] = memoryview(buf)[:end]
        return joined[:need]

    def appended(self, buf: bytes) -> None:
        """The batch complete_lines(buf) gave is stored: hold what follows its last line."""
        end = buf.rfind(b"\n") + 1
        if end == len(buf):
            self.partial.clear()
        else:
            self.partial = bytearray(memoryview(buf)[end:])

    def pending_record(self) -> bytearray | None:
        """The held partial line as one record (newline-terminated), or None; the writer is
        done with it. Call `committed()` once it is stored."""
        if not self.partial:
            return None
        self.partial += b"\n"
        return self.partial

    def pending_failed(self) -> None:
        """The record pending_record() gave was not stored: hold the line again."""
        del self.partial[-1:]

    def committed(self) -> None:
        self.partial.clear()
