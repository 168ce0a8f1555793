"""walfs.Wal stays small (issue 34: at most 25 public names), and docs/api.md says what
they are and what each old name became: every name in its tables exists."""

import re
from pathlib import Path

import pytest

import walfs
from walfs.engine import capabilities, names, rules

API_MD = Path(__file__).resolve().parent.parent / "docs" / "api.md"
MAX_NAMES = 25


def public_names(wal: walfs.Wal) -> set[str]:
    """Methods, properties and attributes (class and instance), dunders and _private left out."""
    return {n for n in set(dir(type(wal))) | set(vars(wal)) if not n.startswith("_")}


def table(heading: str) -> list[list[str]]:
    """The rows of the first table under `## heading` in docs/api.md, as cell texts."""
    text = API_MD.read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]


def leading_name(cell: str) -> str:
    """`append(topic, ...)` -> append; `closed` -> closed."""
    got = re.match(r"`([a-z_]+)", cell)
    assert got, cell
    return got.group(1)


def test_wal_has_at_most_25_public_names_and_the_doc_lists_them(open_wal) -> None:
    w = open_wal()
    got = public_names(w)
    assert len(got) <= MAX_NAMES, sorted(got)
    documented = [leading_name(row[0]) for row in table("The names")]
    assert len(documented) == len(set(documented))
    assert set(documented) == got
    # A view for another org has the same names (no extra attributes on the copy).
    assert public_names(w.for_org(2)) == got


def test_every_replacement_in_the_doc_exists(open_wal) -> None:
    w = open_wal()
    rows = table("What each old name became")
    assert len(rows) >= 30
    namespaces = {"walfs.engine.rules": rules, "walfs.engine.names": names}
    for old, new in rows:
        for ref in re.findall(r"`([^`]+)`", old):
            name = leading_name(f"`{ref}`")
            assert name not in public_names(w) or name in ("committed",), f"{name} is still on Wal"
        refs = re.findall(r"`([^`]+)`", new)
        assert refs or new.startswith("gone"), new
        for ref in refs:
            if ref.startswith("[") or ref.startswith("fn") or "==" in ref:
                continue  # an expression built of names checked in other rows
            call = ref.split("(", 1)[0]
            if call.startswith("wal.engine."):
                attr = call.removeprefix("wal.engine.")
                assert hasattr(w.engine, attr) or attr in ("",), ref
            elif call.startswith("walfs."):
                module, _, attr = call.rpartition(".")
                assert hasattr(namespaces.get(module) or walfs, attr), ref
            elif call in {"Maintenance", "DiskUse", "Checks"}:
                assert hasattr(capabilities, call)
            elif "." not in call and call.isidentifier():
                assert call in public_names(w), ref


def test_append_takes_one_record_or_one_batch(open_wal) -> None:
    w = open_wal()
    assert w.append("t", b"one") == 0
    assert w.append("t", bytearray(b"two")) == 1
    assert w.append("t", [b"a", memoryview(b"b")]) == 2
    assert w.append("t", (v for v in [b"c"])) == 4  # any iterable
    assert w.append("t", [(b"k", None, [("h", b"v")], 7), b"plain"]) == 5
    assert w.read("t", 0) == [b"one", b"two", b"a", b"b", b"c", b"", b"plain"]
    rec = w.read_records("t", 5, max_records=1)[0]
    assert (rec.key, rec.value, rec.headers, rec.timestamp_ms) == (b"k", None, (("h", b"v"),), 7)
    assert w.append("t", b"keyed", key=b"k2", timestamp_ms=9) == 7
    assert w.read_records("t", 7)[0].key == b"k2"
    with pytest.raises(TypeError):
        w.append("t", "a str")
    with pytest.raises(TypeError):
        w.append("t", [b"a"], key=b"a key is per record in a batch")
    with pytest.raises(ValueError):
        w.append("t", [])
    assert w.info("t").high_watermark == 8
