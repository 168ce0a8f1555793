"""Issue 36 through the mount: a damaged catalog copy (and a damaged segment header) and
`walfs mount` still starts, serves every line, and heals the copy (its log says so)."""

from __future__ import annotations

import os

from catalog_files import CAT, MIRROR, flip, zero
from conftest_mount import Mount

pytest_plugins = ["conftest_mount"]


def test_mount_starts_and_serves_with_a_damaged_catalog_copy(make_mount) -> None:
    m: Mount = make_mount()
    m.start()
    m.sh('for i in $(seq 1 200); do echo "line $i of a" >> a; echo "line $i of b" >> b; done')
    want = {t: "".join(f"line {i} of {t}\n" for i in range(1, 201)) for t in ("a", "b")}
    m.stop()
    data = str(m.data)
    zero(os.path.join(data, CAT), 0, 4096)  # streams.cat's first page: header and entries
    flip(os.path.join(data, "seg-0000000000000001.wal"), 41)  # and a segment header
    m.start()
    for t, text in want.items():
        assert m.out(f"cat {t}") == text
    metrics = m.out("getfattr --only-values -n user.walfs.metrics .")
    assert "walfs_healed_copies_total 2.0" in metrics, metrics
    m.sh("echo 'after the heal' >> a")
    m.stop()
    log = m.read_log()
    assert f"{CAT}: rewritten from the good copy (healed)" in log, log
    assert "seg-0000000000000001.wal: header fails its crc; rebuilt from streams.cat" in log, log
    # both copies whole again: damage to the mirror now is healed from streams.cat
    zero(os.path.join(data, MIRROR), 0, 4096)
    m.start()
    assert m.out("cat a") == want["a"] + "after the heal\n"
    assert "walfs_healed_copies_total 1.0" in m.out("getfattr --only-values -n user.walfs.metrics .")
    m.stop()
