"""Property-based tests: any sequence of appends, batches, trims, reopens and power cuts
leaves the WAL equal to a simple model; key/header encoding round-trips."""

import shutil
import tempfile

from conftest import SMALL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import walfs
from walfs.engine.records import decode_meta, encode_meta
from walfs.local import debug

values = st.binary(min_size=0, max_size=3000)
topics = st.sampled_from(["a", "b", "c/d".replace("/", "_"), "ünï"])
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), topics, st.integers(0, 2), values),
        st.tuples(st.just("batch"), topics, st.integers(0, 2), st.lists(values, min_size=1, max_size=40)),
        st.tuples(st.just("trim"), topics, st.integers(0, 2), st.floats(0, 1)),
        st.tuples(st.just("reopen")),
        st.tuples(st.just("sync_and_cut"), st.integers(0, 1 << 20)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_wal_matches_model(sequence):
    d = tempfile.mkdtemp()
    model: dict[tuple[str, int], list[bytes]] = {}
    low: dict[tuple[str, int], int] = {}
    try:
        w = walfs.Wal(d, fsync="never", test_mode=True, **SMALL)
        for op in sequence:
            if op[0] == "append":
                _, t, p, v = op
                assert w.append(t, v, partition=p) == len(model.setdefault((t, p), []))
                model[(t, p)].append(v)
            elif op[0] == "batch":
                _, t, p, vs = op
                assert w.append(t, vs, partition=p) == len(model.setdefault((t, p), []))
                model[(t, p)].extend(vs)
            elif op[0] == "trim":
                _, t, p, frac = op
                n = len(model.get((t, p), []))
                to = int(n * frac)
                w.trim(t, to, partition=p)
                low[(t, p)] = max(low.get((t, p), 0), to)
            elif op[0] == "reopen":
                w.close()
                w = walfs.Wal(d, test_mode=True)
            else:
                # A sync, then a power cut with nothing unsynced: nothing may change.
                w.sync()
                debug.power_cut(w, seed=op[1], keep_permille=0)
                w = walfs.Wal(d, test_mode=True)
            for (t, p), vals in model.items():
                lo = low.get((t, p), 0)
                assert w.info(t, p).low_watermark == lo
                assert w.info(t, p).high_watermark == len(vals)
                assert w.read(t, lo, p, max_records=10_000, max_bytes=1 << 30) == vals[lo:]
                view = b"".join(v + b"\n" for v in vals)
                start = len(b"".join(v + b"\n" for v in vals[:lo]))
                assert w.info(t, p).byte_size == len(view)
                assert w.read_bytes(t, start, len(view), p) == view[start:]
        w.close()
    finally:
        shutil.rmtree(d)


headers = st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=50))), max_size=5)


@given(
    st.one_of(st.none(), st.binary(max_size=100)),
    headers,
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
)
def test_meta_round_trip(key, hdrs, ts):
    meta = encode_meta(key, hdrs, ts)
    k, h, t = decode_meta(meta)
    assert (k, list(h), t) == (key, [tuple(x) for x in hdrs], ts)
    if key is None and not hdrs and ts is None:
        assert meta == b""
