"""Engine: the C core (walfs._core) as Python methods. It translates arguments into C
buffers and negative errnos into exceptions, and nothing more: offsets, the topic index
and consumers live in wal.py and its neighbours. The GIL is released in every C call."""

import array
import errno
import functools
import logging
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from walfs._core import ffi, lib

# Every ffi.from_buffer over a caller's buffer is released with `with` before an error
# leaves the call. A cffi buffer left alive in a frame that an exception's traceback keeps
# holds an export of the caller's memoryview; when the cyclic garbage collector breaks
# that traceback's cycle, CPython 3.11 clears the memoryview despite the export and then
# frees it twice (python/cpython#77894, fixed in 3.12): the process dies of a segfault.
# tests/test_engine_buffers.py runs every such call into an error this way.
from walfs.engine.types import REC_LAYOUT, REC_SIZE
from walfs.errors import BufferTooSmallError, WalClosedError, WalFailedError, corrupt_record, from_errno

FSYNC_MODES = {
    "never": lib.WALFS_FSYNC_NEVER,
    "interval": lib.WALFS_FSYNC_INTERVAL,
    "always": lib.WALFS_FSYNC_ALWAYS,
}
MAX_U32 = 2**32 - 1  # a uint32_t of the ABI: a record's length, a stream's file cap
CORE_LOG = logging.getLogger("walfs.core")


@ffi.def_extern()
def _walfs_core_log(level: int, directory: Any, message: Any) -> None:
    """The C core's messages (torn tails cut, damage found, fsync failures) into logging."""
    where = ffi.string(directory).decode(errors="replace")
    CORE_LOG.log(level, "%s: %s", where, ffi.string(message).decode(errors="replace"))


lib.walfs_set_log(lib._walfs_core_log)
_append_one = lib.walfs_append_one  # looked up once: the single-append hot path
# A fetch's batch is written whole by C before anyone reads it: no zero-fill first.
_uncleared = ffi.new_allocator(should_clear_after_alloc=False)
# Batches below this size are copied into bytes (and their buffer freed at once): the
# Kafka answer joins them into its frame anyway (walfs/kafka/framing.py).
SMALL_BATCH = 64 * 1024
# A fetch's buffer holds at most this much; the first record is always served whole.
MAX_BATCH_BUFFER = 64 << 20
# The C walfs_rec_t (csrc/walfs.h) is the contract's REC_LAYOUT (walfs.engine.contract, the
# one home of the descriptor layout): its size and every field's offset and size are checked.
_REC_FIELDS = ffi.typeof("walfs_rec_t").fields
assert ffi.sizeof("walfs_rec_t") == REC_SIZE and [n for n, _ in _REC_FIELDS] == [n for n, _ in REC_LAYOUT]
assert [(f.offset, ffi.sizeof(f.type)) for _, f in _REC_FIELDS] == [
    (sum(int(u[2:]) for _, u in REC_LAYOUT[:i]), int(t[2:])) for i, (_, t) in enumerate(REC_LAYOUT)
]


@functools.cache
def _stream_id_head() -> struct.Struct:
    """walfs_stream_id_t's fields before the name, as one struct (offsets from the cdef)."""
    fields = [("stream_no", "I"), ("partition", "I"), ("org_id", "Q"), ("topic_hash", "16s")]
    fields += [("deleted", "I"), ("name_len", "H")]
    fmt, pos = "=", 0
    for field, code in fields:
        off = ffi.offsetof("walfs_stream_id_t", field)
        fmt += (f"{off - pos}x" if off > pos else "") + code
        pos = off + struct.calcsize("=" + code)
    return struct.Struct(fmt)


@dataclass(frozen=True, slots=True)
class CStreamInfo:
    stream_no: int
    org_id: int
    partition: int
    topic_hash: bytes
    name: str
    low_offset: int
    first_offset: int
    next_offset: int
    low_byte: int
    next_byte: int
    first_gid: int
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class RawRecord:
    gid: int
    offset: int
    timestamp_ms: int
    meta: bytes
    value: bytes


class Engine:
    def __init__(
        self,
        path: str,
        *,
        fsync: str = "interval",
        fsync_interval_ms: int = 100,
        segment_size: int = 1 << 30,
        block_size: int = 10 << 20,
        read_only: bool = False,
        test_mode: bool = False,
        io_uring: bool = True,
        min_free_bytes: int = 0,
    ) -> None:
        if fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {sorted(FSYNC_MODES)}, not {fsync!r}")
        opts = ffi.new("walfs_options_t *")
        lib.walfs_default_options(opts)
        opts.segment_size = segment_size
        opts.block_size = block_size
        opts.fsync_mode = FSYNC_MODES[fsync]
        opts.fsync_interval_ms = fsync_interval_ms
        opts.read_only = int(read_only)
        opts.test_mode = int(test_mode)
        opts.no_io_uring = int(not io_uring)
        opts.min_free_bytes = min_free_bytes
        out = ffi.new("walfs_t **")
        err = ffi.new("char[2048]")
        rc = lib.walfs_open(path.encode(), opts, out, err, 2048)
        if rc < 0:
            raise from_errno(rc, ffi.string(err).decode(errors="replace") or f"cannot open {path}")
        self._h: Any = out[0]
        self.path = path
        self.read_only = read_only
        # Held shared by every call and exclusively by close(): the handle cannot vanish
        # under a call running in another thread.
        self._users = 0
        self._mu = threading.Lock()  # plain lock on the hot path; the condition for close()
        self._idle = threading.Condition(self._mu)
        # append_one's users, counted without the lock: one item per call in flight.
        # list.append and list.pop are atomic under the GIL (and in free-threaded builds);
        # a call pins before it reads the handle, and close() clears the handle before it
        # looks at the pins, so one of the two always sees the other (append_one).
        self._pins: list[None] = []
        self._tls = threading.local()

    # -- lifetime -----------------------------------------------------------------
    def _enter(self) -> Any:
        with self._mu:
            if self._h is None:
                raise WalClosedError(f"WAL {self.path} is closed")
            self._users += 1
            return self._h

    def _exit(self) -> None:
        with self._mu:
            self._users -= 1
            if self._users == 0 and self._h is None:
                self._idle.notify_all()

    def _detach(self) -> Any:
        with self._idle:
            h = self._h
            self._h = None
            while self._users or self._pins:
                self._idle.wait()
            return h

    def close(self) -> None:
        h = self._detach()
        if h is not None:
            rc = lib.walfs_close(h)
            if rc < 0:
                raise from_errno(rc, f"closing {self.path}")

    def power_cut(self, seed: int, keep_permille: int = 0) -> None:
        """Test mode: drops what was written since the last sync, then abandons the handle."""
        h = self._detach()
        if h is not None:
            self._check(lib.walfs_debug_power_cut(h, seed, keep_permille), "power cut")

    @property
    def closed(self) -> bool:
        return self._h is None

    @property
    def failed(self) -> bool:
        """True once an fsync failed: the WAL refuses appends until it is reopened."""
        h = self._h
        return h is not None and lib.walfs_failed(h) != 0

    def _check(self, rc: int, what: str) -> int:
        if rc < 0:
            if rc == -errno.EIO and self._h is not None and lib.walfs_failed(self._h):
                raise WalFailedError(f"{what}: an fsync failed earlier; reopen the WAL")
            raise from_errno(rc, what)
        return rc

    # -- streams ------------------------------------------------------------------
    def stream_open(self, org_id: int, partition: int, thash: bytes, name: bytes, create: bool) -> int | None:
        h = self._enter()
        try:
            out = ffi.new("uint32_t *")
            rc = lib.walfs_stream_open(h, org_id, partition, thash, name, len(name), int(create), out)
            if rc == -errno.ENOENT:
                return None
            self._check(rc, f"opening stream {name!r}")
            return int(out[0])
        finally:
            self._exit()

    def stream_count(self) -> int:
        h = self._enter()
        try:
            return int(lib.walfs_stream_count(h))
        finally:
            self._exit()

    def stream_ids(self) -> Iterator[tuple[int, int, int, bytes, str, bool]]:
        """(stream_no, org_id, partition, topic_hash, name, deleted) of every stream, in
        order: who they are, without their marks (walfs_stream_ids, 1,024 a call): the
        open's one pass over 100,000 streams."""
        first, ids = 0, ffi.new("walfs_stream_id_t[]", 1024)
        size, at = ffi.sizeof("walfs_stream_id_t"), ffi.offsetof("walfs_stream_id_t", "name")
        head = _stream_id_head()
        while True:
            h = self._enter()
            try:
                n = self._check(lib.walfs_stream_ids(h, first, ids, 1024), "stream ids")
            finally:
                self._exit()
            # One copy of the batch and a struct unpack per stream: a cffi field read costs
            # about as much as the whole unpack (100,000 streams at an open).
            raw = ffi.buffer(ids, n * size)[:]
            for k in range(0, n * size, size):
                no, partition, org_id, thash, deleted, name_len = head.unpack_from(raw, k)
                name = raw[k + at : k + at + name_len].decode("utf-8", "surrogateescape")
                yield no, org_id, partition, thash, name, bool(deleted)
            if n < 1024:
                return
            first += n

    def next_byte(self, stream_no: int) -> int:
        """The stream's byte view size (a cheap call: getattr asks it for every stat)."""
        h = self._enter()
        try:
            return self._check(lib.walfs_stream_next_byte(h, stream_no), "stream size")
        finally:
            self._exit()

    def marks(self, stream_no: int) -> tuple[int, int, int, int, int]:
        """(low_offset, next_offset, durable_offset, next_byte, durable_byte): one cheap call."""
        h = self._enter()
        try:
            m = self._tls_marks()
            self._check(lib.walfs_stream_marks(h, stream_no, m), "stream marks")
            return m.low_offset, m.next_offset, m.durable_offset, m.next_byte, m.durable_byte
        finally:
            self._exit()

    def _tls_marks(self) -> Any:
        m = getattr(self._tls, "marks", None)
        if m is None:
            m = self._tls.marks = ffi.new("walfs_marks_t *")
        return m

    def stream_info(self, stream_no: int) -> CStreamInfo:
        h = self._enter()
        try:
            i = ffi.new("walfs_stream_info_t *")
            self._check(lib.walfs_stream_info(h, stream_no, i), "stream info")
            return CStreamInfo(
                stream_no=i.stream_no,
                org_id=i.org_id,
                partition=i.partition,
                topic_hash=bytes(ffi.buffer(i.topic_hash, 16)),
                name=bytes(ffi.buffer(i.name, i.name_len)).decode("utf-8", "surrogateescape"),
                low_offset=i.low_offset,
                first_offset=i.first_offset,
                next_offset=i.next_offset,
                low_byte=i.low_byte,
                next_byte=i.next_byte,
                first_gid=i.first_gid,
                deleted=bool(i.deleted),
            )
        finally:
            self._exit()

    def append_nowait(
        self, stream_no: int, data: Any, meta_lens: array.array, value_lens: array.array
    ) -> tuple[int, int, int] | None:
        """As append, but None (nothing appended) where it would wait on the disk or another
        appender: a new segment or gid epoch, or a lock another thread holds
        (walfs_append_nowait)."""
        return self._append(True, stream_no, data, meta_lens, value_lens)

    def append(
        self, stream_no: int, data: Any, meta_lens: array.array, value_lens: array.array
    ) -> tuple[int, int, int]:
        """Appends len(meta_lens) records, their bodies (meta || value) back to back in data,
        without waiting for durability; returns (first gid, first offset, ticket for
        wait_durable)."""
        got = self._append(False, stream_no, data, meta_lens, value_lens)
        assert got is not None
        return got

    def append_pieces(
        self, stream_no: int, pieces: Sequence[Any], meta_lens: array.array, value_lens: array.array
    ) -> tuple[int, int, int]:
        """As append, but the bodies lie back to back in the concatenation of `pieces`
        (buffers), a body possibly spanning pieces: the pieces are not joined here
        (walfs_append_pieces)."""
        h = self._enter()
        try:
            out = ffi.new("uint64_t[3]")
            # Every cffi buffer is released before an error can leave the call: one kept
            # alive by a traceback crashes CPython 3.11's garbage collector (cpython#77894).
            with ExitStack() as held:
                bufs = [held.enter_context(ffi.from_buffer(p)) for p in pieces]
                cmetas = held.enter_context(ffi.from_buffer("uint32_t[]", meta_lens))
                cvalues = held.enter_context(ffi.from_buffer("uint32_t[]", value_lens))
                rc = lib.walfs_append_pieces(
                    h,
                    stream_no,
                    len(meta_lens),
                    len(bufs),
                    ffi.new("const uint8_t *[]", bufs),
                    ffi.new("uint64_t[]", [len(b) for b in bufs]),
                    cmetas,
                    cvalues,
                    0,
                    out,
                    out + 1,
                    out + 2,
                )
            self._check(rc, "append")
            return int(out[0]), int(out[1]), int(out[2])
        finally:
            self._exit()

    def _append(
        self, nowait: bool, stream_no: int, data: Any, meta_lens: array.array, value_lens: array.array
    ) -> tuple[int, int, int] | None:
        h = self._enter()
        try:
            out = ffi.new("uint64_t[3]")
            with (
                ffi.from_buffer(data) as cdata,
                ffi.from_buffer("uint32_t[]", meta_lens) as cmetas,
                ffi.from_buffer("uint32_t[]", value_lens) as cvalues,
            ):
                args = (h, stream_no, len(meta_lens), cdata, cmetas, cvalues)
                if nowait:
                    rc = lib.walfs_append_nowait(*args, out, out + 1, out + 2)
                else:
                    rc = lib.walfs_append(*args, 0, out, out + 1, out + 2)
            if nowait and rc == -errno.EAGAIN:
                return None
            self._check(rc, "append")
            return int(out[0]), int(out[1]), int(out[2])
        finally:
            self._exit()

    def append_one(self, stream_no: int, value: bytes, wait: bool) -> int:
        """Appends one plain record in one C call (value is passed without a copy); with
        wait, under fsync="always", returns once it is durable. Returns its offset. The
        hot path of single appends: no lock, a pin (see __init__) keeps the handle alive
        for the call; a close() that came meanwhile is woken when the last pin goes."""
        pins = self._pins
        pins.append(None)
        try:
            h = self._h
            if h is None:
                raise WalClosedError(f"WAL {self.path} is closed")
            if type(value) is bytes:
                rc = _append_one(h, stream_no, value, len(value), wait)
            else:
                with ffi.from_buffer(value) as data:
                    rc = _append_one(h, stream_no, data, len(value), wait)
        finally:
            pins.pop()
            if self._h is None:  # close() may be waiting for this call
                with self._idle:
                    self._idle.notify_all()
        if rc < 0:
            self._check(rc, "append")
        return rc

    def append_lines(self, stream_no: int, data: bytes) -> tuple[int, int, int, int]:
        """Appends the lines of data as one batch; returns (first gid, first offset, ticket, n)."""
        h = self._enter()
        try:
            tl = self._tls
            out = getattr(tl, "lines_out", None)
            if out is None:  # per thread: two cffi allocations less per call
                out = tl.lines_out = ffi.new("uint64_t[3]")
                tl.lines_n = ffi.new("uint32_t *")
            n = tl.lines_n
            with ffi.from_buffer(data) as cdata:
                rc = lib.walfs_append_lines(h, stream_no, cdata, len(data), 0, out, out + 1, out + 2, n)
            self._check(rc, "append")
            return int(out[0]), int(out[1]), int(out[2]), int(n[0])
        finally:
            self._exit()

    def byte_position(self, stream_no: int, offset: int) -> int:
        h = self._enter()
        try:
            out = ffi.new("uint64_t *")
            self._check(
                lib.walfs_byte_position(h, stream_no, offset, out), f"byte position of offset {offset}"
            )
            return int(out[0])
        finally:
            self._exit()

    def offset_at_byte(self, stream_no: int, position: int) -> int:
        h = self._enter()
        try:
            out = ffi.new("uint64_t *")
            self._check(lib.walfs_offset_at_byte(h, stream_no, position, out), f"offset at byte {position}")
            return int(out[0])
        finally:
            self._exit()

    def wait_durable(self, ticket: int) -> None:
        """Returns once the append with this ticket is durable (one fsync for many waiters)."""
        h = self._enter()
        try:
            self._check(lib.walfs_wait_durable(h, ticket), "fsync")
        finally:
            self._exit()

    def sync(self) -> None:
        h = self._enter()
        try:
            self._check(lib.walfs_sync(h), "sync")
        finally:
            self._exit()

    def trim(self, stream_no: int, low_offset: int) -> None:
        h = self._enter()
        try:
            self._check(lib.walfs_trim(h, stream_no, low_offset), "trim")
        finally:
            self._exit()

    def stream_delete(self, stream_no: int) -> None:
        h = self._enter()
        try:
            self._check(lib.walfs_stream_delete(h, stream_no), "delete stream")
        finally:
            self._exit()

    def reclaim(self) -> int:
        h = self._enter()
        try:
            return self._check(lib.walfs_reclaim(h), "reclaim")
        finally:
            self._exit()

    def stream_files(self, stream_no: int, max_files: int = 0) -> tuple[int, list[int]]:
        """The segment files a stream is charged for (csrc/budget.c): their number and, for
        up to max_files of them (oldest first), the first offset of its runs in each."""
        h = self._enter()
        try:
            while True:
                out = ffi.new("uint64_t[]", max(max_files, 1))
                n = self._check(lib.walfs_stream_files(h, stream_no, out, max_files), "stream files")
                if n <= max_files or max_files == 0:
                    return n, [int(out[i]) for i in range(min(n, max_files))]
                max_files = n  # grew since the first call: ask again with room for all
        finally:
            self._exit()

    @property
    def segment_size(self) -> int:
        """Bytes per segment file (the geometry the WAL was created with)."""
        h = self._enter()
        try:
            return int(lib.walfs_segment_size(h))
        finally:
            self._exit()

    def set_file_cap(self, stream_no: int, cap: int) -> None:
        """At most `cap` charged files for the stream (0: no cap); past it an append fails
        with EDQUOT (nothing appended)."""
        h = self._enter()
        try:
            self._check(lib.walfs_stream_set_file_cap(h, stream_no, cap), "file cap")
        finally:
            self._exit()

    # -- reading ------------------------------------------------------------------
    def _buffers(self, buflen: int, max_records: int) -> tuple[bytearray, Any]:
        """This thread's read buffers, grown as needed: no allocation per read."""
        tl = self._tls
        if getattr(tl, "buf", None) is None or len(tl.buf) < buflen:
            tl.buf = bytearray(buflen)
        if getattr(tl, "nrecs", 0) < max_records:
            tl.recs = ffi.new("walfs_rec_t[]", max_records)
            tl.nrecs = max_records
        return tl.buf, tl.recs

    def _read_raw(
        self, stream_no: int, offset: int, max_records: int, max_bytes: int
    ) -> tuple[int, memoryview, list[int]]:
        """Runs one C read by offset; returns (n, buffer, the walfs_rec_t array as 64-bit words)."""
        max_records = max(1, min(max_records, 1 << 20))
        buflen = max(min(max_bytes, 16 << 20), 64 << 10)
        h = self._enter()
        try:
            while True:
                buf, recs = self._buffers(buflen, max_records)
                needed = ffi.new("uint64_t *")
                with ffi.from_buffer(buf) as cbuf:
                    rc = lib.walfs_read_offset(
                        h, stream_no, offset, max_records, max_bytes, cbuf, len(buf), recs, needed
                    )
                if rc == -errno.ENOBUFS:
                    buflen = int(needed[0])
                    continue
                if rc == -errno.EBADMSG:
                    raise corrupt_record(int(needed[0]), stream_no)
                n = self._check(rc, "read")
                # walfs_rec_t is five 64-bit words: gid, offset, ts, meta_len | value_len << 32, pos.
                words = memoryview(ffi.buffer(recs, n * ffi.sizeof("walfs_rec_t"))).cast("Q").tolist()
                return n, memoryview(buf), words
        finally:
            self._exit()

    def read_into(
        self, stream_no: int, offset: int, buf: Any, recs: Any, max_records: int, max_bytes: int
    ) -> int:
        """Reads records from `offset` into caller-owned writable buffers: record bodies
        (meta || value) into `buf`, one REC_LAYOUT descriptor each into `recs`."""
        max_records = min(max_records, len(memoryview(recs).cast("B")) // REC_SIZE)
        h = self._enter()
        try:
            needed = ffi.new("uint64_t *")
            with (
                ffi.from_buffer(buf, require_writable=True) as cbuf,
                ffi.from_buffer("walfs_rec_t[]", recs, require_writable=True) as crecs,
            ):
                rc = lib.walfs_read_offset(
                    h, stream_no, offset, max_records, max_bytes, cbuf, len(cbuf), crecs, needed
                )
            if rc == -errno.ENOBUFS:
                raise BufferTooSmallError(int(needed[0]))
            if rc == -errno.EBADMSG:
                raise corrupt_record(int(needed[0]), stream_no)
            return self._check(rc, "read")
        finally:
            self._exit()

    def read_kafka_batch(
        self, stream_no: int, offset: int, max_records: int, max_bytes: int
    ) -> bytes | memoryview:
        """Records from `offset` on as one Kafka record batch (v2), encoded in C straight
        from the mapped segment (walfs_read_kafka_batch: no read buffer, every record's
        CRC checked first). The batch, at most about max_bytes long (at least one record
        when any exists), is returned in a buffer of its own; b"" at the end."""
        max_records = max(1, min(max_records, 1 << 20))
        outlen = min(max(max_bytes, 1), MAX_BATCH_BUFFER) + lib.WALFS_KAFKA_BATCH_HEAD
        h = self._enter()
        try:
            needed = ffi.new("uint64_t *")
            while True:
                out = _uncleared("uint8_t[]", outlen)
                rc = lib.walfs_read_kafka_batch(
                    h, stream_no, offset, max_records, max_bytes, out, outlen, needed
                )
                if rc == -errno.ENOBUFS:
                    outlen = int(needed[0])
                    continue
                if rc == -errno.EBADMSG:
                    raise corrupt_record(int(needed[0]), stream_no)
                if rc == -errno.EINVAL:
                    raise ValueError(
                        f"the meta section of record {int(needed[0])} of stream {stream_no} does not parse"
                    )
                n = self._check(rc, "read")
                if n < SMALL_BATCH:
                    return ffi.buffer(out, n)[:]
                return memoryview(ffi.buffer(out, n))  # keeps `out` alive
        finally:
            self._exit()

    def read(self, stream_no: int, offset: int, max_records: int, max_bytes: int) -> list[RawRecord]:
        """Records from `offset` on; at least one if any exists."""
        n, mv, w = self._read_raw(stream_no, offset, max_records, max_bytes)
        out = []
        for k in range(0, 5 * n, 5):
            pos, lens = w[k + 4], w[k + 3]
            split = pos + (lens & 0xFFFFFFFF)
            out.append(
                RawRecord(
                    w[k],
                    w[k + 1],
                    w[k + 2] - (1 << 64) if w[k + 2] >= 1 << 63 else w[k + 2],
                    mv[pos:split].tobytes(),
                    mv[split : split + (lens >> 32)].tobytes(),
                )
            )
        return out

    def read_values(self, stream_no: int, offset: int, max_records: int, max_bytes: int) -> list[bytes]:
        """Only the values: the fast path for wal.read()."""
        n, mv, w = self._read_raw(stream_no, offset, max_records, max_bytes)
        out = []
        for k in range(3, 5 * n, 5):
            start = w[k + 1] + (w[k] & 0xFFFFFFFF)
            out.append(mv[start : start + (w[k] >> 32)].tobytes())
        return out

    def read_bytes(self, stream_no: int, position: int, size: int) -> bytes:
        tl = self._tls
        if getattr(tl, "view", None) is None or len(tl.view) < size:
            tl.view = bytearray(max(size, 128 << 10))
        n = self.read_bytes_into(stream_no, position, tl.view, size)
        return bytes(memoryview(tl.view)[:n])

    def bytes_resident(self, stream_no: int, position: int, size: int) -> bool:
        """Whether reading these view bytes would not wait for the disk (a hint)."""
        h = self._enter()
        try:
            return bool(self._check(lib.walfs_bytes_resident(h, stream_no, position, size), "mincore"))
        finally:
            self._exit()

    def read_bytes_into(self, stream_no: int, position: int, buf: Any, size: int) -> int:
        """Copies up to size bytes of the view from position into buf; returns the count
        (short only at the end). CorruptRecordError when a record in the range is damaged."""
        h = self._enter()
        try:
            bad = ffi.new("uint64_t *")
            with ffi.from_buffer(buf, require_writable=True) as out:
                n = lib.walfs_read_bytes(h, stream_no, position, out, size, bad)
            if n == -errno.EBADMSG:
                raise corrupt_record(int(bad[0]), stream_no)
            return self._check(n, "read_bytes")
        finally:
            self._exit()

    def offset_for_time(self, stream_no: int, ts: int) -> int:
        h = self._enter()
        try:
            out = ffi.new("uint64_t *")
            self._check(lib.walfs_offset_for_time(h, stream_no, ts, out), "offset_for_timestamp")
            return int(out[0])
        finally:
            self._exit()

    def recovery_report(self) -> dict[str, int]:
        h = self._enter()
        try:
            r = ffi.new("walfs_recovery_report_t *")
            lib.walfs_recovery_report(h, r)
            return {k: int(getattr(r, k)) for k in dir(r)}
        finally:
            self._exit()

    def upgrade_catalog(self) -> None:
        """walfs_catalog_upgrade: a version 1 catalog becomes version 3 with its mirror (the
        caller's own files, the cursor manifest first, are upgraded before it)."""
        h = self._enter()
        try:
            self._check(lib.walfs_catalog_upgrade(h), f"upgrading {self.path}/streams.cat")
        finally:
            self._exit()

    def disk_stats(self) -> dict[str, Any]:
        """walfs_disk_stats: the fsync histogram (bucket bounds in seconds, per-bucket
        counts with +Inf last, sum in seconds) and the bytes appends wrote."""
        h = self._enter()
        try:
            d = ffi.new("walfs_disk_stats_t *")
            lib.walfs_disk_stats(h, d)
            return {
                "fsync_bounds": [ns / 1e9 for ns in d.fsync_le_ns],
                "fsync_counts": list(d.fsync_counts),
                "fsync_sum": d.fsync_sum_ns / 1e9,
                "write_bytes": int(d.write_bytes),
            }
        finally:
            self._exit()

    def verify(
        self, progress: Callable[[int, int, int, int], None] | None = None
    ) -> list[tuple[int, int, str]]:
        """Checks every stored record; returns (stream_no, offset, problem) for each bad one.
        `progress(streams_done, streams, records, bytes)` is called after each stream and
        every 65536 records (walfs_verify_progress)."""
        problems: list[tuple[int, int, str]] = []

        @ffi.callback("void(void *, uint32_t, uint64_t, const char *)")
        def report(_ctx: Any, stream_no: int, offset: int, what: Any) -> None:
            problems.append((int(stream_no), int(offset), ffi.string(what).decode()))

        raised: list[BaseException] = []

        @ffi.callback("int(void *, uint32_t, uint32_t, uint64_t, uint64_t)", onerror=lambda *_: 1)
        def tell(_ctx: Any, done: int, streams: int, records: int, nbytes: int) -> int:
            try:
                if progress is not None:
                    progress(int(done), int(streams), int(records), int(nbytes))
            except BaseException as exc:  # Ctrl-C while checking: stop and raise it here
                raised.append(exc)
                return 1
            return 0

        h = self._enter()
        try:
            told = tell if progress is not None else ffi.NULL
            rc = int(lib.walfs_verify_progress(h, report, told, ffi.NULL))
            if raised:
                raise raised[0]
            self._check(rc, "verify")
        finally:
            self._exit()
        return problems

    def inject_fault(self, op: str, err: int, after: int = 0, count: int = -1) -> None:
        ops = {
            "write": lib.WALFS_FAULT_WRITE,
            "sync": lib.WALFS_FAULT_SYNC,
            "alloc": lib.WALFS_FAULT_ALLOC,
            "reclaim": lib.WALFS_FAULT_RECLAIM,
            "writeback": lib.WALFS_FAULT_WRITEBACK,
            "catalog_split": lib.WALFS_FAULT_CAT_SPLIT,
        }
        h = self._enter()
        try:
            self._check(lib.walfs_debug_fail(h, ops[op], err, after, count), "inject fault")
        finally:
            self._exit()

    def slow_sync(self, ms: int) -> None:
        h = self._enter()
        try:
            self._check(lib.walfs_debug_slow_sync(h, ms), "slow sync")
        finally:
            self._exit()

    def writeback_wait(self) -> dict[str, int]:
        """Waits until the core's writeback thread has written back every range handed to
        it so far (csrc/writeback.c); its counts since open (walfs_writeback_stats_t)."""
        h = self._enter()
        try:
            st = ffi.new("walfs_writeback_stats_t *")
            self._check(lib.walfs_debug_writeback_wait(h, st), "writeback wait")
            return {k: int(getattr(st, k)) for k in ("queued", "refused", "done", "failed", "max_queue_ns")}
        finally:
            self._exit()
