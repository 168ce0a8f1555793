"""Salvage (`walfs fsck --repair DAMAGED --into NEW`): copies every intact record of a damaged
data directory into a new one, without opening the damaged WAL and without writing to it.

The damaged directory is only ever opened O_RDONLY and mapped read-only. The raw scanners of
csrc/salvage.c find the WAL's identity (catalog header, else any segment header), every
catalog entry whose CRC verifies, and every record whose CRC verifies in every segment file
(by its index slot or by walking from the previous record), independent of the catalog.

The new WAL gets the same topics, partitions and orgs, and the same offsets: a stream whose
first salvaged record is at offset N starts at N (walfs_salvage_start_at). Records are never
invented: when records inside a stream are lost, the records after the hole move down to
close it, and the report says so (old range, shift). Keys, headers and timestamps are kept
(an append time is kept as the record's timestamp). Consumer cursors are copied, shifted like
the offsets they point at. Everything that could not be kept is listed; the caller exits
non-zero then.
"""

from __future__ import annotations

import array
import errno
import mmap
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from walfs._core import ffi, lib
from walfs.engine.names import stream_key
from walfs.engine.records import decode_meta, encode_meta, producer_of, value_is_null, with_producer
from walfs.errors import WalCorruptError, WalError, from_errno
from walfs.local.cursors import MANIFEST, CursorStore, key_org

_SEG_NAME = re.compile(r"^seg-([0-9a-f]{16})\.wal$")
_BATCH = 512


@dataclass
class Loss:
    """One thing salvage could not keep: where, which offsets (or bytes), why."""

    where: str
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}: {self.why}"


@dataclass
class SalvageReport:
    streams: int = 0
    records: int = 0
    cursors: int = 0
    lost: list[Loss] = field(default_factory=list)
    renumbered: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "streams": self.streams,
            "records": self.records,
            "cursors": self.cursors,
            "lost": [vars(x) for x in self.lost],
            "renumbered": self.renumbered,
        }


@dataclass
class _Rec:
    seg: int
    file_pos: int
    offset: int
    view_pos: int
    gid: int
    ts: int
    meta_len: int
    value_len: int
    batch_left: int


@dataclass
class _Stream:
    no: int
    org_id: int = 1
    partition: int = 0
    thash: bytes = b""
    name: bytes = b""
    defined: bool = False
    deleted: bool = False  # a DELETE entry: the topic was deleted, nothing to copy
    low: int = 0
    floor: int = 0
    recs: dict[int, _Rec] = field(default_factory=dict)


def _read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


class _Segments:
    """The damaged directory's segment files, mapped read-only (never written)."""

    def __init__(self, src: str, report: SalvageReport) -> None:
        self.maps: dict[int, mmap.mmap] = {}
        self.names: dict[int, str] = {}
        for name in sorted(os.listdir(src)):
            m = _SEG_NAME.match(name)
            if not m:
                continue
            path = os.path.join(src, name)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                size = os.fstat(fd).st_size
                if size == 0:
                    report.lost.append(Loss(name, "whole file", "empty (0 bytes)"))
                    continue
                self.maps[int(m.group(1), 16)] = mmap.mmap(fd, size, prot=mmap.PROT_READ)
                self.names[int(m.group(1), 16)] = name
            finally:
                os.close(fd)

    def close(self) -> None:
        for m in self.maps.values():
            m.close()


def _identity(src: str, segs: _Segments) -> tuple[int, int, int, str]:
    """(uuid, block_size, segment_size, where it came from)."""
    out_u, out_b, out_s = ffi.new("uint64_t *"), ffi.new("uint32_t *"), ffi.new("uint64_t *")
    candidates: list[tuple[str, bytes]] = []
    try:
        candidates.append(("streams.cat", _read_file(os.path.join(src, "streams.cat"))[:64]))
    except OSError:
        pass
    for sid, m in sorted(segs.maps.items()):
        candidates.append((segs.names[sid], m[:64]))
    for where, head in candidates:
        if lib.walfs_salvage_identity(head, len(head), out_u, out_b, out_s) == 0:
            return int(out_u[0]), int(out_b[0]), int(out_s[0]), where
    raise WalError(
        f"{src}: no catalog or segment header verifies: this is not a walfs data directory "
        "or every header is damaged"
    )


def _catalog(src: str, uuid: int, streams: dict[int, _Stream], report: SalvageReport) -> None:
    try:
        data = _read_file(os.path.join(src, "streams.cat"))
    except OSError as e:
        report.lost.append(Loss("streams.cat", "whole file", f"unreadable ({e.strerror})"))
        return
    cap = max(1, len(data) // 8)
    out = ffi.new("walfs_salvage_entry_t[]", cap)
    skipped = ffi.new("uint64_t *")
    n = lib.walfs_salvage_catalog(data, len(data), uuid, out, cap, skipped)
    if n < 0:
        raise from_errno(n, "scanning streams.cat")
    if skipped[0]:
        report.lost.append(
            Loss(
                "streams.cat",
                f"{int(skipped[0])} bytes",
                "entries whose CRC fails (definitions, trims or floors in them are lost)",
            )
        )
    for i in range(n):
        ent = out[i]
        s = streams.setdefault(ent.stream_no, _Stream(ent.stream_no))
        if ent.type == 1:
            s.org_id, s.partition, s.defined = int(ent.org_id), int(ent.partition), True
            s.thash = bytes(ffi.buffer(ent.topic_hash, 16))
            s.name = bytes(ffi.buffer(ent.name, ent.name_len))
        elif ent.type == 2:
            s.low = max(s.low, int(ent.a))
        elif ent.type == 3:
            s.floor = max(s.floor, int(ent.a))
        elif ent.type == 5:
            s.deleted = True


def _scan(
    segs: _Segments,
    uuid: int,
    block_size: int,
    streams: dict[int, _Stream],
    report: SalvageReport,
    progress: Callable[[str], None],
) -> None:
    cap = block_size // 36 + 2
    total = len(segs.maps)
    for k, (sid, m) in enumerate(sorted(segs.maps.items())):
        buf = ffi.from_buffer(m)
        block = ffi.new("uint64_t *", 0)
        needed, bad = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        found = 0
        while block[0] != 2**64 - 1:
            out = ffi.new("walfs_salvage_rec_t[]", cap)
            n = lib.walfs_salvage_segment(buf, len(m), uuid, sid, block_size, block, out, cap, needed, bad)
            if n < 0:
                if -n == errno.ENOBUFS:
                    cap = int(needed[0])
                    continue
                raise from_errno(n, f"scanning {segs.names[sid]}")
            for i in range(n):
                r = out[i]
                s = streams.setdefault(r.stream_no, _Stream(r.stream_no))
                rec = _Rec(
                    sid,
                    int(r.file_pos),
                    int(r.offset),
                    int(r.view_pos),
                    int(r.gid),
                    int(r.timestamp_ms),
                    int(r.meta_len),
                    int(r.value_len),
                    int(r.batch_left),
                )
                old = s.recs.get(rec.offset)
                if old is None or rec.gid > old.gid:  # a stale copy has the lower gid
                    s.recs[rec.offset] = rec
            found += n
        del buf
        if bad[0]:
            report.lost.append(
                Loss(
                    segs.names[sid],
                    f"{int(bad[0])} block runs",
                    "run header fails its CRC: the records of those runs are lost",
                )
            )
        progress(f"salvage: {segs.names[sid]} ({k + 1}/{total}): {found} intact records")


def _value(segs: _Segments, r: _Rec) -> tuple[bytes, bytes]:
    m = segs.maps[r.seg]
    start = r.file_pos + 36
    body = m[start : start + r.meta_len + r.value_len]
    return body[: r.meta_len], body[r.meta_len :]


def _cursors(
    src: str, dst: str, shift_of: dict[str, Callable[[int], int | None]], report: SalvageReport
) -> None:
    root = os.path.join(src, "cursors")
    # The manifest lists the cursor files that must exist (walfs/local/cursors.py): a listed
    # one that is gone is a loss to report. A damaged manifest is listed, and only the
    # files are copied.
    listed: dict[str, set[str]] = {}
    try:
        listed = CursorStore(src, read_only=True).read_manifest() or {}
    except WalCorruptError:
        report.lost.append(Loss(MANIFEST, "cursor manifest", "damaged (checksum fails)"))
    except OSError as e:
        report.lost.append(Loss(MANIFEST, "cursor manifest", f"unreadable ({e.strerror})"))
    try:
        groups = sorted({e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)} | set(listed))
    except OSError:
        groups = sorted(listed)
    store = CursorStore(dst)
    source = CursorStore(src, read_only=True)
    for g in groups:
        try:
            found = {e.name for e in os.scandir(os.path.join(root, g)) if ".tmp." not in e.name}
        except FileNotFoundError:
            found = set()
        except OSError as e:
            report.lost.append(Loss(f"cursors/{g}", "group", f"unreadable ({e.strerror})"))
            continue
        for key in sorted(found | listed.get(g, set())):
            where = f"cursors/{g}/{key}"
            if key.startswith("."):  # an org marker (walfs/local/cursors.py): the group's org
                org = key_org(key)
                if org is not None:
                    store.create_group(g, org)
                continue
            try:
                if not os.path.exists(os.path.join(root, g, key)):
                    report.lost.append(Loss(where, "cursor", f"missing (listed in {MANIFEST})"))
                    continue
                # The cursor file format's one reader (walfs/local/cursors.py), both forms.
                entry = source.get_entry(g, key)
            except OSError as e:
                report.lost.append(Loss(where, "cursor", f"unreadable ({e.strerror})"))
                continue
            except (WalCorruptError, ValueError):
                report.lost.append(Loss(where, "cursor", "damaged (checksum fails)"))
                continue
            if entry is None:
                continue
            offset, metadata = entry
            fix = shift_of.get(key)
            new = fix(offset) if fix else offset
            if new is None:
                report.lost.append(Loss(where, f"cursor at {offset}", "points into lost records"))
                continue
            try:
                store.put(g, key, new, metadata=metadata)
            except (ValueError, OSError) as e:
                report.lost.append(Loss(where, "cursor", f"cannot be written ({e})"))
                continue
            report.cursors += 1


def salvage(src: str, dst: str, progress: Callable[[str], None] | None = None) -> SalvageReport:
    """Copies every intact record and cursor of src into the new data directory dst."""
    from walfs.local.core import Engine

    say = progress or (lambda msg: print(msg, file=sys.stderr))
    if os.path.realpath(src) == os.path.realpath(dst):
        raise ValueError("salvage needs a new directory: --into must differ from the damaged one")
    if os.path.exists(dst) and os.listdir(dst):
        raise FileExistsError(f"{dst} is not empty: salvage writes a new data directory")
    report = SalvageReport()
    segs = _Segments(src, report)
    try:
        uuid, block_size, segment_size, where = _identity(src, segs)
        say(f"salvage: WAL identity from {where}: block {block_size}, segment {segment_size}")
        if where != "streams.cat":
            report.lost.append(
                Loss("streams.cat", "header", f"missing or damaged; WAL identity taken from {where}")
            )
        streams: dict[int, _Stream] = {}
        _catalog(src, uuid, streams, report)
        _scan(segs, uuid, block_size, streams, report, say)
        eng = Engine(
            dst,
            fsync="never",
            fsync_interval_ms=100,
            segment_size=segment_size,
            block_size=block_size,
            read_only=False,
            test_mode=False,
            io_uring=True,
        )
        shift_of: dict[str, Callable[[int], int | None]] = {}
        try:
            for no in sorted(streams):
                _copy_stream(eng, segs, streams[no], report, shift_of)
            eng.sync()
        finally:
            eng.close()
    finally:
        segs.close()
    _cursors(src, dst, shift_of, report)
    return report


def _copy_stream(
    eng: Any,
    segs: _Segments,
    s: _Stream,
    report: SalvageReport,
    shift_of: dict[str, Callable[[int], int | None]],
) -> None:
    label = (
        f"stream {s.name.decode(errors='replace')!r}[{s.partition}] org {s.org_id}"
        if s.defined
        else f"stream #{s.no}"
    )
    if s.deleted:
        return  # deleted on purpose: its name may belong to a newer stream
    offsets = sorted(o for o in s.recs if o >= s.low)
    # An append that did not finish (its last record still expects more) never became durable.
    while offsets and s.recs[offsets[-1]].batch_left > 0:
        cut = offsets.pop()
        report.lost.append(Loss(label, f"offset {cut}", "incomplete last batch (never acknowledged)"))
    if not s.defined:
        if offsets:
            report.lost.append(
                Loss(
                    label,
                    f"offsets {offsets[0]}..{offsets[-1]} ({len(offsets)} records)",
                    "no intact catalog definition: topic, partition and org unknown; not copied",
                )
            )
        return
    expected_end = max(s.floor, offsets[-1] + 1 if offsets else 0)
    stream_no = eng.stream_open(s.org_id, s.partition, s.thash, s.name, True)
    report.streams += 1
    if not offsets:
        if expected_end > s.low:
            report.lost.append(Loss(label, f"offsets {s.low}..{expected_end - 1}", "no intact record"))
        if expected_end:
            _start_at(eng, stream_no, expected_end, 0)
        return
    first = offsets[0]
    if first > s.low:
        report.lost.append(
            Loss(
                label,
                f"offsets {s.low}..{first - 1} ({first - s.low} records)",
                "records fail their CRC or their run is lost",
            )
        )
    _start_at(eng, stream_no, first, s.recs[first].view_pos)
    holes: list[tuple[int, int]] = []  # (old offset where a hole starts, records missing)
    prev = first - 1
    for o in offsets:
        if o != prev + 1:
            holes.append((prev + 1, o - prev - 1))
            report.lost.append(
                Loss(
                    label,
                    f"offsets {prev + 1}..{o - 1} ({o - prev - 1} records)",
                    "records fail their CRC or their run is lost",
                )
            )
        prev = o
    shift = 0
    for start, n in holes:
        shift += n
        report.renumbered.append(
            f"{label}: records from offset {start + n} on move down by {shift} (to {start + n - shift})"
        )
    if s.floor > prev + 1:
        report.lost.append(Loss(label, f"offsets {prev + 1}..{s.floor - 1}", "tail records lost"))

    def new_offset(old: int, holes: list[tuple[int, int]] = holes) -> int | None:
        moved = 0
        for start, n in holes:
            if old >= start + n:
                moved += n
            elif old > start:
                return None
        return old - moved

    shift_of[stream_key(s.org_id, s.thash, s.partition)] = new_offset
    for i in range(0, len(offsets), _BATCH):
        chunk = offsets[i : i + _BATCH]
        bodies, metas, values = [], array.array("I"), array.array("I")
        for o in chunk:
            r = s.recs[o]
            meta, value = _value(segs, r)
            key, headers, ts = decode_meta(meta) if meta else (None, (), None)
            producer = producer_of(meta)
            meta = encode_meta(key, headers, r.ts if ts is None else ts, value_is_null(meta))
            if producer is not None:
                meta = with_producer(meta, producer)
            bodies.append(meta + value)
            metas.append(len(meta))
            values.append(len(value))
        eng.append(stream_no, b"".join(bodies), metas, values)
        report.records += len(chunk)


def _start_at(eng: Any, stream_no: int, offset: int, byte: int) -> None:
    h = eng._enter()
    try:
        rc = lib.walfs_salvage_start_at(h, stream_no, offset, byte)
        if rc < 0:
            raise from_errno(rc, f"starting stream {stream_no} at offset {offset}")
    finally:
        eng._exit()
