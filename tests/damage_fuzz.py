"""The damage fuzzer (issue 9): one closed WAL with many streams, batches, trims, cursors and
records from 0 bytes to several blocks is damaged at random (flipped bits, zeroed 4 KiB
pages, truncated files, deleted files, of every kind: streams.cat, segments, index.snap,
cursor files, cursors.manifest, topics.conf and their mirrors), then opened and read whole in a forked
child with a time limit.

Allowed outcomes of a case: a clear walfs exception (at open or on read), or every record
and cursor returned exactly as written, except records whose read raised
CorruptRecordError (each is skipped and the read goes on after it). Damage to records alone
(flipped bits or zeroed pages that touch nothing but the records, index slots and free space
of runs the golden WAL sealed or gave a durable frontier: "data damage") must not fail the
open (issue 36: a damaged record is quarantined): the WAL opens, those records raise
CorruptRecordError, every other record reads back. Anything else is a failure: a signal, a
hang, other bytes, durable records or cursors missing without an error, a refused open on
data damage.

Metadata-only damage (issue 36, --metadata): damage to ONE of the catalog's two copies
(streams.cat or streams.cat.mirror: flipped bits, zeroed sectors and pages, cut short,
deleted), to segment headers (flipped bits, zeroed first sector or page), and to one copy
of the Python layer's files kept twice (topics.conf, cursors.manifest, one slot of a
cursor file). One copy of
everything stays intact, so the only allowed outcome is a WAL that opens, reads back every
record and cursor as written, and heals: a second open finds nothing to heal.

Used by tests/test_damage_fuzz.py (a few hundred cases in CI) and by `make torture`
(tools/torture_fuzz.py, WALFS_FUZZ_CASES cases). Every case is reproducible from its seed:
    python tests/damage_fuzz.py --seed N   (prints the damage and the outcome)
    python tests/damage_fuzz.py --metadata --seed N
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field

SEGMENT_SIZE = 1 << 20
BLOCK_SIZE = 64 << 10
CHILD_TIMEOUT_S = 30.0
GROUPS = ("g1", "g2")


def _value(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.05:
        return b""
    if kind < 0.75:
        return rng.randbytes(rng.randint(1, 200))
    if kind < 0.93:
        return rng.randbytes(rng.randint(200, 20_000))
    return rng.randbytes(rng.randint(BLOCK_SIZE, 3 * BLOCK_SIZE))  # several blocks


def _digest(key: bytes | None, value: bytes, headers: object) -> str:
    h = hashlib.sha256()
    h.update(b"-" if key is None else b"k" + bytes(key))
    h.update(repr([(k, None if v is None else bytes(v)) for k, v in headers or ()]).encode())  # type: ignore[attr-defined]
    h.update(b"|" + bytes(value))
    return h.hexdigest()[:24]


@dataclass
class Golden:
    """What was written: per stream key "topic/partition", the digest of every offset, the
    low watermark after trims, and the committed cursors."""

    path: str
    records: dict[str, list[str]] = field(default_factory=dict)
    low: dict[str, int] = field(default_factory=dict)
    cursors: dict[str, dict[str, int]] = field(default_factory=dict)
    areas: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # data_areas()


def build_golden(path: str, seed: int = 1) -> Golden:
    """Writes the WAL every case damages a copy of, and closes it (everything durable)."""
    from walfs.wal import Wal

    rng = random.Random(seed)
    g = Golden(path)
    streams = [(f"topic-{t}", p) for t in range(4) for p in range(2)]
    wal = Wal(
        path,
        fsync="never",
        segment_size=SEGMENT_SIZE,
        block_size=BLOCK_SIZE,
        reclaim_interval_s=3600,
    )
    try:
        for _ in range(70):
            topic, part = rng.choice(streams)
            key = f"{topic}/{part}"
            batch = []
            for _ in range(rng.randint(1, 6)):
                k = rng.randbytes(rng.randint(0, 12)) if rng.random() < 0.5 else None
                hdrs = [("h", rng.randbytes(rng.randint(0, 8)))] if rng.random() < 0.3 else []
                ts = rng.randint(1, 2**40) if rng.random() < 0.3 else None
                batch.append((k, _value(rng), hdrs, ts))
            wal.append(topic, batch, part)
            g.records.setdefault(key, []).extend(_digest(k, v, h) for k, v, h, _ in batch)
            if rng.random() < 0.08:
                high = wal.info(topic, part).high_watermark
                low = rng.randint(0, high)
                wal.trim(topic, low, part)
                g.low[key] = max(g.low.get(key, 0), low)
            if rng.random() < 0.15:
                grp = rng.choice(GROUPS)
                off = rng.randint(0, wal.info(topic, part).high_watermark)
                wal.commit(grp, topic, off, part)
                g.cursors.setdefault(grp, {})[key] = off
        wal.retention("topic-0", retention_ms=10**12, retention_groups=[GROUPS[0]])
        wal.sync()
        wal.engine.reclaim()
    finally:
        wal.close()
    for key in g.records:
        g.low.setdefault(key, 0)
    g.areas = data_areas(path)
    return g


# -- damage -----------------------------------------------------------------------------
def _files(d: str) -> list[str]:
    out = []
    for root, _dirs, names in os.walk(d):
        for n in names:
            if n != "LOCK":
                out.append(os.path.join(root, n))
    return sorted(out)


def _hot_offset(rng: random.Random, path: str, size: int) -> int:
    """Mostly where the bytes that matter are: headers, run headers, early records."""
    if size == 0:
        return 0
    if os.path.basename(path).startswith("seg-") and rng.random() < 0.6:
        n_blocks = max(1, (size - 4096) // BLOCK_SIZE)
        choice = rng.random()
        if choice < 0.2:
            return rng.randrange(min(size, 64))
        base = 4096 + rng.randrange(n_blocks) * BLOCK_SIZE
        if choice < 0.45:  # a block run's headers, or a carved block's carve header and slot 0
            return min(size - 1, base + rng.randrange(640))  # open/seal headers
        if choice < 0.6:  # the headers of a small run in a later slot of a carved block (4 KiB apart)
            return min(size - 1, base + rng.randrange(BLOCK_SIZE // 4096) * 4096 + rng.randrange(640))
        return min(size - 1, base + 1024 + rng.randrange(4096))  # first records
    return rng.randrange(size)


def data_areas(d: str) -> dict[str, list[tuple[int, int]]]:
    """Per segment file (relative path), the byte ranges of d's runs that hold records, index
    slots or free space between them: [run + 1024, run end), for every run with a seal or a
    durable frontier (so all of a closed WAL's runs)."""
    out: dict[str, list[tuple[int, int]]] = {}
    for path in _files(d):
        name = os.path.basename(path)
        if not name.startswith("seg-"):
            continue
        with open(path, "rb") as f:
            data = f.read()
        ranges = []
        k = 0
        while 4096 + (k + 1) * BLOCK_SIZE <= len(data):
            run = 4096 + k * BLOCK_SIZE
            n_blocks = int.from_bytes(data[run + 12 : run + 16], "little")
            if data[run : run + 8] != b"WALFSBLK" or data[run + 10] != 1 or n_blocks == 0:
                k += 1
                continue
            if any(data[run + at : run + at + 8] == b"WALFSBLK" for at in (256, 512)):
                ranges.append((run + 1024, run + n_blocks * BLOCK_SIZE))
            k += n_blocks
        out[os.path.relpath(path, d)] = ranges
    return out


def is_data_damage(areas: dict[str, list[tuple[int, int]]], spans: list[tuple[str, int, int]]) -> bool:
    """Whether every damaged span (file, start, end) lies inside the data areas."""
    return bool(spans) and all(
        any(lo <= start and end <= hi for lo, hi in areas.get(rel, ())) for rel, start, end in spans
    )


def damage(d: str, rng: random.Random, spans: list[tuple[str, int, int]] | None = None) -> list[str]:
    """Applies 1-3 random damages to the WAL in d; returns what was done. With `spans`,
    appends the byte ranges of flips and zeroed pages to it, and (None, 0, 0) for a truncated
    or deleted file."""
    done = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        files = _files(d)
        if not files:
            break
        # A kind of file first (catalog, segment, index snapshot, cursor), then one of it,
        # so that the many small cursor files do not crowd out the rest.
        kinds: dict[str, list[str]] = {}
        for f in files:
            b = os.path.basename(f)
            kinds.setdefault(
                "seg" if b.startswith("seg-") else b if "." in b and "/cursors/" not in f else "cursor", []
            ).append(f)
        path = rng.choice(kinds[rng.choice(sorted(kinds))])
        rel = os.path.relpath(path, d)
        size = os.path.getsize(path)
        kind = rng.choices(("flip", "zero", "truncate", "delete"), (5, 3, 2, 1))[0]
        if kind == "flip" and size:
            with open(path, "r+b") as f:
                flips = []
                for _ in range(rng.randint(1, 8)):
                    pos = _hot_offset(rng, path, size)
                    f.seek(pos)
                    b = f.read(1)[0] ^ (1 << rng.randrange(8))
                    f.seek(pos)
                    f.write(bytes([b]))
                    flips.append(pos)
                    if spans is not None:
                        spans.append((rel, pos, pos + 1))
            done.append(f"flip {rel} @{flips}")
        elif kind == "zero" and size:
            pos = _hot_offset(rng, path, size) & ~4095
            with open(path, "r+b") as f:
                f.seek(pos)
                f.write(bytes(min(4096, size - pos)))
            if spans is not None:
                spans.append((rel, pos, pos + min(4096, size - pos)))
            done.append(f"zero {rel} page@{pos}")
        elif kind == "truncate":
            if spans is not None:
                spans.append(("", 0, 0))
            new = rng.randrange(size + 1) if rng.random() < 0.5 else _hot_offset(rng, path, size)
            os.truncate(path, new)
            done.append(f"truncate {rel} {size}->{new}")
        else:
            if spans is not None:
                spans.append(("", 0, 0))
            os.unlink(path)
            done.append(f"delete {rel}")
    return done


def damage_data(d: str, rng: random.Random, areas: dict[str, list[tuple[int, int]]],
                spans: list[tuple[str, int, int]]) -> list[str]:
    """Data damage only (--data-only): 1-3 of flipped bits or a zeroed 4 KiB page (clipped to
    the run), each inside the records, index slots or free space of one run (data_areas)."""
    done = []
    choices = [(rel, lo, hi) for rel, ranges in sorted(areas.items()) for lo, hi in ranges]
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        rel, lo, hi = rng.choice(choices)
        path = os.path.join(d, rel)
        # Where the bytes are: the run's first records, or its last index slots.
        near = (lo, min(hi, lo + 16384)) if rng.random() < 0.7 else (max(lo, hi - 8192), hi)
        with open(path, "r+b") as f:
            if rng.random() < 0.6:
                flips = sorted({rng.randrange(*near) for _ in range(rng.randint(1, 8))})
                for pos in flips:
                    f.seek(pos)
                    b = f.read(1)[0] ^ (1 << rng.randrange(8))
                    f.seek(pos)
                    f.write(bytes([b]))
                    spans.append((rel, pos, pos + 1))
                done.append(f"flip {rel} @{flips}")
            else:
                page = rng.randrange(*near) & ~4095
                start, end = max(page, lo), min(page + 4096, hi)
                f.seek(start)
                f.write(bytes(end - start))
                spans.append((rel, start, end))
                done.append(f"zero {rel} {start}..{end}")
    return done


# -- the check, in a child ----------------------------------------------------------------
# The Python layer's files kept twice (issue 36): each damage of damage_one_copy hits one
# copy of one of them, and a case must then read back whole (a refused open is a failure).
MIRRORED = ("topics.conf", "cursors.manifest", "cursors.manifest.journal")


def damage_one_copy(d: str, rng: random.Random) -> list[str]:
    """Applies 1-3 damages to the metadata files kept twice, never both copies of one:
    topics.conf or its mirror, cursors.manifest or its mirror, one slot of a cursor file
    (slot A in the first 4 KiB page, slot B after it). Flipped bits, a zeroed 4 KiB page,
    a truncation, a deletion (of a whole copy: a cursor file's slot B is cut off)."""
    copies: dict[str, tuple[str, int, int | None]] = {}  # copy -> (file, first byte, end)
    for name in MIRRORED:
        for path in (os.path.join(d, name), os.path.join(d, name + ".mirror")):
            if os.path.exists(path):
                copies[os.path.relpath(path, d)] = (path, 0, None)
    for path in _files(os.path.join(d, "cursors")):
        if not os.path.basename(path).startswith("."):
            rel = os.path.relpath(path, d)
            copies[rel + " slot A"] = (path, 0, 4096)
            copies[rel + " slot B"] = (path, 4096, None)
    done: list[str] = []
    hit: set[str] = set()
    for _ in range(rng.choice((1, 1, 2, 3))):
        left = sorted(c for c in copies if c.split(" slot ")[0].removesuffix(".mirror") not in hit)
        if not left:
            break
        # A kind first (topics.conf, the manifest, a cursor file), so that the many cursor
        # files do not crowd out the rest.
        kinds: dict[str, list[str]] = {}
        for c in left:
            kinds.setdefault("cursor" if " slot " in c else c.removesuffix(".mirror"), []).append(c)
        copy = rng.choice(kinds[rng.choice(sorted(kinds))])
        path, start, end = copies[copy]
        hit.add(copy.split(" slot ")[0].removesuffix(".mirror"))
        size = os.path.getsize(path)
        end = size if end is None else min(end, size)
        kind = rng.choices(("flip", "zero", "truncate", "delete"), (5, 3, 2, 1))[0]
        if kind == "flip":
            with open(path, "r+b") as f:
                flips = []
                for _ in range(rng.randint(1, 8)):
                    pos = rng.randrange(start, end)
                    f.seek(pos)
                    b = f.read(1)[0] ^ (1 << rng.randrange(8))
                    f.seek(pos)
                    f.write(bytes([b]))
                    flips.append(pos)
            done.append(f"flip {copy} @{flips}")
        elif kind == "zero":
            with open(path, "r+b") as f:
                f.seek(start)
                f.write(bytes(min(4096, end - start)))
            done.append(f"zero {copy} page@{start}")
        elif kind == "truncate" or start:  # a cursor file's slot B: cut off
            new = rng.randrange(max(start, 1) if start else 0, end)
            os.truncate(path, new)
            done.append(f"truncate {copy} {size}->{new}")
        elif end == size:
            os.unlink(path)
            done.append(f"delete {copy}")
        else:  # a cursor file's slot A: its page zeroed (a deletion would take both)
            with open(path, "r+b") as f:
                f.write(bytes(4096))
            done.append(f"zero {copy} page@0")
    return done


# -- the check, in a child ----------------------------------------------------------------
CATALOG_COPIES = ("streams.cat", "streams.cat.mirror")


def damage_metadata(d: str, rng: random.Random) -> list[str]:
    """1-3 damages of metadata that has a second source: one catalog copy (the same one
    for the whole case) and segment headers (rebuilt from the catalog)."""
    done = []
    copy = rng.choice(CATALOG_COPIES)
    segs = sorted(f for f in _files(d) if os.path.basename(f).startswith("seg-"))
    for _ in range(rng.choice((1, 1, 2, 3))):
        if rng.random() < 0.6 or not segs:
            path = os.path.join(d, copy)
            if not os.path.exists(path):
                continue
            size = os.path.getsize(path)
            kind = rng.choices(("flip", "sector", "page", "truncate", "delete"), (5, 3, 2, 2, 1))[0]
            if kind == "flip" and size:
                with open(path, "r+b") as f:
                    flips = []
                    for _ in range(rng.randint(1, 8)):
                        pos = rng.randrange(min(size, 64)) if rng.random() < 0.3 else rng.randrange(size)
                        f.seek(pos)
                        b = f.read(1)[0] ^ (1 << rng.randrange(8))
                        f.seek(pos)
                        f.write(bytes([b]))
                        flips.append(pos)
                done.append(f"flip {copy} @{flips}")
            elif kind in ("sector", "page") and size:
                unit = 512 if kind == "sector" else 4096
                pos = rng.randrange(size) // unit * unit
                with open(path, "r+b") as f:
                    f.seek(pos)
                    f.write(bytes(min(unit, size - pos)))
                done.append(f"zero {copy} {unit}@{pos}")
            elif kind == "truncate":
                new = rng.randrange(size + 1)
                os.truncate(path, new)
                done.append(f"truncate {copy} {size}->{new}")
            elif kind == "delete":
                os.unlink(path)
                done.append(f"delete {copy}")
        else:
            path = rng.choice(segs)
            rel = os.path.relpath(path, d)
            kind = rng.choice(("flip", "sector", "page"))
            with open(path, "r+b") as f:
                if kind == "flip":
                    pos = rng.randrange(64)
                    f.seek(pos)
                    b = f.read(1)[0] ^ (1 << rng.randrange(8))
                    f.seek(pos)
                    f.write(bytes([b]))
                    done.append(f"flip {rel} header @{pos}")
                else:
                    f.write(bytes(512 if kind == "sector" else 4096))
                    done.append(f"zero {rel} first {kind}")
    return done


# -- the check, in a child ----------------------------------------------------------------
def read_everything(d: str) -> dict:
    """Opens the WAL and reads all of it. Returns {"error": ...} for a walfs exception
    (allowed), else what was read; a record whose read raises CorruptRecordError is listed
    in its stream's "corrupt" and the read goes on after it."""
    from walfs.engine.rules import committed_offsets
    from walfs.errors import CorruptRecordError, WalError
    from walfs.wal import Wal

    try:
        wal = Wal(
            d,
            fsync="never",
            segment_size=SEGMENT_SIZE,
            block_size=BLOCK_SIZE,
                reclaim_interval_s=3600,
        )
    except WalError as e:
        return {"error": f"open: {type(e).__name__}: {e}"}
    try:
        streams: dict[str, dict] = {}
        for topic, part in wal.streams():
            low, high = wal.info(topic, part).low_watermark, wal.info(topic, part).high_watermark
            got: dict[int, str] = {}
            corrupt: list[int] = []
            off = low
            while off < high:
                try:
                    recs = wal.read_records(topic, off, part, max_records=500)
                except CorruptRecordError as e:
                    if e.offset != off:
                        raise
                    corrupt.append(off)
                    off += 1
                    continue
                if not recs:
                    break
                for r in recs:
                    got[r.offset] = _digest(r.key, r.value, r.headers)
                off = recs[-1].offset + 1
            streams[f"{topic}/{part}"] = {"low": low, "high": high, "got": got, "corrupt": corrupt}
        cursors = {
            grp: {f"{t}/{p}": o for (t, p), o in committed_offsets(wal.engine, grp).items()} for grp in GROUPS
        }
        return {"streams": streams, "cursors": cursors}
    except WalError as e:
        return {"error": f"read: {type(e).__name__}: {e}"}
    finally:
        try:
            wal.close()
        except WalError:
            pass


def second_open(d: str) -> dict | None:
    """After a metadata-only case healed at its first open: None when the second open finds
    nothing to heal, else what is wrong."""
    from walfs.errors import WalError
    from walfs.wal import Wal

    try:
        wal = Wal(d, fsync="never", segment_size=SEGMENT_SIZE, block_size=BLOCK_SIZE, reclaim_interval_s=3600)
    except WalError as e:
        return {"error": f"reopen: {type(e).__name__}: {e}"}
    rep = wal.engine.report()
    wal.close()
    if rep["healed"] or rep["metadata_damaged"] or rep.get("healed_files"):
        return {"uncaught": f"a second open still heals: {rep}"}
    return None


def _in_child(d: str, timeout: float, reopen: bool = False) -> dict:
    fd, out = tempfile.mkstemp(prefix="fuzz-out-")
    os.close(fd)
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            res = read_everything(d)
            if reopen and "error" not in res:
                res = second_open(d) or res
            with open(out, "w") as f:
                json.dump(res, f)
        except BaseException as e:  # noqa: BLE001 - reported as a failure by the parent
            with open(out, "w") as f:
                json.dump({"uncaught": f"{type(e).__name__}: {e}"}, f)
            code = 3
        os._exit(code)
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        p, st = os.waitpid(pid, os.WNOHANG)
        if p:
            status = st
            break
        time.sleep(0.01)
    try:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"hang": timeout}
        if os.WIFSIGNALED(status):
            return {"signal": signal.Signals(os.WTERMSIG(status)).name}
        with open(out) as f:
            text = f.read()
        return json.loads(text) if text else {"uncaught": f"child exited {os.WEXITSTATUS(status)} silently"}
    finally:
        os.unlink(out)


def judge(g: Golden, res: dict, data_damage: bool = False) -> tuple[str, str] | None:
    """None when the outcome is allowed, else (failure class, detail)."""
    for bad in ("signal", "hang", "uncaught"):
        if bad in res:
            return bad, str(res[bad])
    if "error" in res:
        if data_damage and res["error"].startswith("open:"):
            return "open refused on data damage", res["error"]
        return None
    streams = res["streams"]
    for key, written in g.records.items():
        low = g.low[key]
        if low >= len(written):
            continue  # nothing durable left to find
        s = streams.get(key)
        if s is None:
            return "stream missing", key
        got = {int(o): dig for o, dig in s["got"].items()}  # str keys after JSON
        for off, dig in got.items():
            if off >= len(written) or written[off] != dig:
                return "other bytes", f"{key} offset {off}"
        missing = [o for o in range(low, len(written)) if o not in got and o not in s["corrupt"]]
        if missing:
            return "records missing", f"{key} offsets {missing[0]}..{missing[-1]} ({len(missing)})"
        if s["high"] != len(written):
            return "high watermark", f"{key} high {s['high']} != {len(written)}"
    for grp, cur in g.cursors.items():
        for key, off in cur.items():
            have = res["cursors"].get(grp, {}).get(key)
            if have is None:  # a deleted cursor file must be reported (cursors.manifest)
                return "cursor missing", f"{grp} {key}"
            if have != off:
                return "cursor", f"{grp} {key}: {have} != {off}"
    for key in streams:
        if key not in g.records:
            return "invented stream", key
    return None


@dataclass
class Outcome:
    seed: int
    damage: list[str]
    result: str
    failure: tuple[str, str] | None
    data_damage: bool = False


MODES = ("any", "data", "metadata")  # any damage; records alone (must open); one copy of metadata (must heal)


def run_case(
    g: Golden, seed: int, workdir: str, timeout: float = CHILD_TIMEOUT_S, mode: str = "any"
) -> Outcome:
    d = os.path.join(workdir, f"case-{seed}")
    shutil.copytree(g.path, d)
    try:
        spans: list[tuple[str, int, int]] = []
        if mode == "data":
            done = damage_data(d, random.Random(seed), g.areas, spans)
        elif mode == "metadata":
            # One copy of the C core's metadata (a catalog copy, segment headers), of the
            # Python layer's files, or of both: never both copies of one file.
            rng = random.Random(seed)
            pick = rng.random()
            done = damage_metadata(d, rng) if pick < 0.6 else []
            done += damage_one_copy(d, rng) if pick >= 0.4 else []
        else:
            done = damage(d, random.Random(seed), spans)
        res = _in_child(d, timeout, reopen=mode == "metadata")
        if mode == "metadata" and "error" in res:  # one copy of everything was intact: a refusal fails
            return Outcome(seed, done, res["error"], ("refused", res["error"]))
        corrupt = sum(len(s["corrupt"]) for s in res.get("streams", {}).values())
        summary = res.get("error") or next(
            (f"{k}: {res[k]}" for k in ("signal", "hang", "uncaught") if k in res),
            f"read back, {corrupt} corrupt records" if corrupt else "read back",
        )
        verdict = judge(g, res, is_data_damage(g.areas, spans))
        return Outcome(seed, done, summary, verdict, is_data_damage(g.areas, spans))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def run(cases: int, first_seed: int, workdir: str, progress: bool = False, mode: str = "any") -> dict:
    """Runs cases seeds first_seed.. and returns a JSON-able summary (mode "data": damage to
    records alone, each case of which must open; "metadata": one copy of the metadata
    damaged, each case of which must open, read back whole and heal)."""
    assert mode in MODES, mode
    g = build_golden(os.path.join(workdir, "golden"))
    failures: list[Outcome] = []
    errors = clean = data_cases = quarantined = 0
    t0 = time.monotonic()
    for i in range(cases):
        o = run_case(g, first_seed + i, workdir, mode=mode)
        data_cases += o.data_damage
        if o.failure:
            failures.append(o)
        elif o.result.startswith("read back"):
            clean += 1
            quarantined += o.result != "read back"
        else:
            errors += 1
        if progress and (i + 1) % 100 == 0:
            print(f"damage fuzz: {i + 1}/{cases} cases, {len(failures)} failures", file=sys.stderr)
    classes: dict[str, list[dict]] = {}
    for o in failures:
        assert o.failure
        classes.setdefault(o.failure[0], []).append(
            {"seed": o.seed, "damage": o.damage, "outcome": o.result, "detail": o.failure[1]}
        )
    return {
        "cases": cases,
        "mode": mode,
        "first_seed": first_seed,
        "read_back_intact": clean,
        "read_back_with_corrupt_records": quarantined,
        "data_damage_cases": data_cases,
        "clear_errors": errors,
        "failures": len(failures),
        "failure_classes": {k: {"count": len(v), "examples": v[:5]} for k, v in classes.items()},
        "seconds": round(time.monotonic() - t0, 1),
        "records_written": sum(len(v) for v in g.records.values()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=int(os.environ.get("WALFS_FUZZ_CASES", "300")))
    p.add_argument("--seed", type=int, default=None, help="run this one seed and show it")
    p.add_argument("--first-seed", type=int, default=int(os.environ.get("WALFS_FUZZ_SEED", "1")))
    p.add_argument("--json-out", help="also write the JSON summary here")
    p.add_argument("--data-only", action="store_true", help="damage records alone (each case must open)")
    p.add_argument(
        "--metadata", action="store_true", help="metadata-only damage: one copy of everything intact"
    )
    args = p.parse_args(argv)
    mode = "data" if args.data_only else "metadata" if args.metadata else "any"
    with tempfile.TemporaryDirectory(prefix="walfs-fuzz-") as wd:
        if args.seed is not None:
            g = build_golden(os.path.join(wd, "golden"))
            o = run_case(g, args.seed, wd, mode=mode)
            summary = {
                "seed": o.seed,
                "damage": o.damage,
                "data_damage": o.data_damage,
                "outcome": o.result,
                "failure": o.failure,
            }
        else:
            summary = run(args.cases, args.first_seed, wd, progress=True, mode=mode)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    return 1 if summary.get("failure") or summary.get("failures") else 0


if __name__ == "__main__":
    sys.exit(main())
