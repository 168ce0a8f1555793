"""`walfs fsck --repair DAMAGED --into NEW` (walfs/local/salvage.py, csrc/salvage.c), run as the real
command: every intact record and cursor lands in the new WAL at its offset, losses are listed
with a non-zero exit, and the damaged original is never changed (hashed before and after)."""

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys

import pytest
from damage_fuzz import Golden, build_golden, damage, judge, read_everything

from walfs.errors import WalError
from walfs.wal import Wal

PYTHON = sys.executable


@pytest.fixture(scope="module")
def golden(tmp_path_factory) -> Golden:
    return build_golden(str(tmp_path_factory.mktemp("golden") / "wal"))


def tree_hash(d: str) -> str:
    h = hashlib.sha256()
    for root, dirs, files in os.walk(d):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(root, n)
            h.update(os.path.relpath(p, d).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
            st = os.stat(p)
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def repair(src: str, dst: str) -> tuple[int, dict]:
    r = subprocess.run(
        [PYTHON, "-m", "walfs", "fsck", "--repair", src, "--into", dst, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode in (0, 1, 2), r.stderr
    return r.returncode, (json.loads(r.stdout) if r.returncode != 2 else {"error": r.stderr})


def copy(golden: Golden, tmp_path, name="src") -> str:
    d = str(tmp_path / name)
    shutil.copytree(golden.path, d)
    return d


def test_intact_wal_is_copied_whole_with_offsets_and_cursors(golden, tmp_path):
    src = copy(golden, tmp_path)
    before = tree_hash(src)
    code, rep = repair(src, str(tmp_path / "new"))
    assert code == 0 and rep["lost"] == [] and rep["renumbered"] == [], rep
    assert tree_hash(src) == before
    res = read_everything(str(tmp_path / "new"))
    assert judge(golden, res) is None, res.get("error")
    # Same offsets: streams that were trimmed start at their low watermark, not at 0.
    trimmed = [k for k, low in golden.low.items() if 0 < low < len(golden.records[k])]
    assert trimmed
    for k in trimmed:
        assert res["streams"][k]["low"] == golden.low[k]


def test_catalog_header_destroyed_wal_does_not_open_salvage_keeps_every_record(golden, tmp_path):
    src = copy(golden, tmp_path)
    for name in ("streams.cat", "streams.cat.mirror"):  # one copy: healed (test_metadata_heal_catalog.py)
        with open(os.path.join(src, name), "r+b") as f:
            f.write(bytes(64))
    with pytest.raises(WalError):
        Wal(src, read_only=True).close()
    before = tree_hash(src)
    code, rep = repair(src, str(tmp_path / "new"))
    assert code == 1 and any("header" in x["what"] for x in rep["lost"]), rep
    assert tree_hash(src) == before
    assert judge(golden, read_everything(str(tmp_path / "new"))) is None


def test_rotten_record_is_listed_and_the_records_around_it_kept(golden, tmp_path):
    src = copy(golden, tmp_path)
    # Rot the body of one record: the first record of the first run of segment 1.
    seg = os.path.join(src, "seg-0000000000000001.wal")
    with open(seg, "r+b") as f:
        f.seek(4096 + 1024 + 36)
        b = f.read(1)
        f.seek(4096 + 1024 + 36)
        f.write(bytes([b[0] ^ 0xFF]))
    before = tree_hash(src)
    code, rep = repair(src, str(tmp_path / "new"))
    assert tree_hash(src) == before
    assert code == 1, rep
    lost = [x for x in rep["lost"] if "offset" in x["what"]]
    assert lost and "CRC" in lost[0]["why"], rep
    res = read_everything(str(tmp_path / "new"))
    assert "error" not in res
    # Every salvaged record is byte-for-byte one that was written (renumbered streams are
    # checked by content only, the others at their own offsets).
    renumbered = {r.split(":")[0] for r in rep["renumbered"]}
    for key, s in res["streams"].items():
        written = golden.records[key]
        for off, dig in s["got"].items():
            if not renumbered:
                assert written[int(off)] == dig
            else:
                assert dig in written
    assert sum(len(s["got"]) for s in res["streams"].values()) == rep["records"]


@pytest.mark.parametrize("seed", range(1000, 1040))
def test_salvage_of_random_damage_never_invents_and_never_touches_the_original(golden, tmp_path, seed):
    src = copy(golden, tmp_path)
    done = damage(src, random.Random(seed))
    before = tree_hash(src)
    code, rep = repair(src, str(tmp_path / "new"))
    assert tree_hash(src) == before, done
    if code == 2:
        return  # nothing identifies the WAL any more: said so, nothing written
    res = read_everything(str(tmp_path / "new"))
    assert "error" not in res, (done, res)
    for key, s in res["streams"].items():
        written = golden.records[key]
        for off, dig in s["got"].items():
            assert dig in written, (done, key, off)
            if not rep["renumbered"]:
                assert written[int(off)] == dig, (done, key, off)
    if code == 0:
        # Everything must be back whole when it says so (a deleted cursor file too: the
        # cursor manifest lists it, so salvage reports it lost).
        assert judge(golden, res) is None, (done, rep)


def test_truncated_segment_keeps_the_records_before_the_cut_and_lists_the_rest(golden, tmp_path):
    src = copy(golden, tmp_path)
    seg = os.path.join(src, "seg-0000000000000001.wal")
    os.truncate(seg, 4096 + 3 * 65536 + 2000)  # mid-run: its slots are gone, its head is not
    before = tree_hash(src)  # (reading it through the WAL may SIGBUS on old cores: not done here)
    r = subprocess.run([PYTHON, "-m", "walfs", "fsck", "--repair", src, "--into", str(tmp_path / "new")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout
    assert "LOST" in r.stdout and "seg-0000000000000001.wal (1/" in r.stderr  # progress on stderr
    assert tree_hash(src) == before
    res = read_everything(str(tmp_path / "new"))
    assert "error" not in res
    kept = 0
    for key, s in res["streams"].items():
        for dig in s["got"].values():
            assert dig in golden.records[key]
            kept += 1
    assert kept > 0


def test_into_must_be_new_and_plain_fsck_points_at_repair(golden, tmp_path):
    src = copy(golden, tmp_path)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep").write_text("x")
    code, out = repair(src, str(busy))
    assert code == 2 and "not empty" in out["error"]
    assert (busy / "keep").read_text() == "x"
    os.unlink(os.path.join(src, "streams.cat"))
    os.unlink(os.path.join(src, "streams.cat.mirror"))  # one copy: healed (test_metadata_heal_catalog.py)
    r = subprocess.run([PYTHON, "-m", "walfs", "fsck", src], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--repair" in r.stderr, r.stderr
    # With the catalog gone no stream has a name: the records are listed, not guessed.
    code, rep = repair(src, str(tmp_path / "new"))
    assert code == 1 and rep["records"] == 0
    assert any("no intact catalog definition" in x["why"] for x in rep["lost"]), rep


def test_garbage_directory_is_refused_without_a_crash(tmp_path):
    src = tmp_path / "junk"
    src.mkdir()
    rng = random.Random(5)
    (src / "streams.cat").write_bytes(b"WALFSCAT" + rng.randbytes(200_000))
    (src / "seg-0000000000000001.wal").write_bytes(b"WALFSSEG" + rng.randbytes(300_000))
    (src / "seg-0000000000000002.wal").write_bytes(b"")
    before = tree_hash(str(src))
    code, out = repair(str(src), str(tmp_path / "new"))
    assert code == 2 and "no catalog or segment header verifies" in out["error"]
    assert tree_hash(str(src)) == before
