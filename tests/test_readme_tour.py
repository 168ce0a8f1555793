"""Every line of README.md's tour, in order, as a user runs it right after `make install`.

The tour is read from the README itself (its ```sh and ```python blocks between "## A
tour" and the next heading), so a line added to the README is run here. Only paths and
the Kafka port are adapted: /var/lib/walfs/* and /mnt/wal become temporary directories,
127.0.0.1:9092 a free port. `make install` itself (system-wide) is not run: the test
starts where it ends, with the data directory mounted (`walfs mount`, as `make start`).
Every shell line must have an expectation below, so a new line cannot go unchecked.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from conftest_mount import daemon_alive, is_mounted
from spark_fixtures import SUBMIT_ARGS

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent

# Shell lines (by their start) -> what their output must contain.
EXPECT_SH = {
    'echo "order 42 paid" >>': "",
    "tail -f /mnt/wal/orders": "order 42 paid",
    "getfattr -d /mnt/wal/orders": "user.walfs.",
    "mkdir /mnt/wal/.consumers/billing": "",
    "cat /mnt/wal/.consumers/billing/orders": "order 42 paid",
    "walfs umount /mnt/wal": "",
    "walfs mount /var/lib/walfs/main /mnt/wal --kafka-listen": "",
    "kcat -b 127.0.0.1:9092 -C -t orders -e": "order 42 paid",
    "cat /mnt/wal/totals": "1",
}
# Python blocks (by a line they hold) -> what their output must contain.
EXPECT_PY = {
    'walfs.Wal("/var/lib/walfs/other"': "[b'order 43 paid', b'a', b'b']",
    "SparkSession.builder": "order 42 paid",
}


def tour_blocks() -> list[tuple[str, str]]:
    """(language, code) of each block of the README's tour, in order."""
    text = (REPO / "README.md").read_text()
    start = text.index("## A tour")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```(sh|python)\n(.*?)```", text[start:end], re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_readme_tour_lines_are_all_checked() -> None:
    blocks = tour_blocks()
    assert [lang for lang, _ in blocks] == ["sh", "python", "python", "sh"]
    lines = [ln for lang, code in blocks if lang == "sh" for ln in code.splitlines() if ln.strip()]
    for ln in lines:
        assert any(ln.startswith(k) for k in EXPECT_SH), f"README tour line without a check: {ln}"
    assert len(lines) == len(EXPECT_SH)


def test_readme_tour_runs_in_order(tmp_path: Path) -> None:
    main, other, mnt = tmp_path / "main", tmp_path / "other", tmp_path / "mnt"
    mnt.mkdir()
    port = free_port()
    env = dict(
        os.environ,
        PATH=f"{VENV_BIN}:{os.environ['PATH']}",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_SUBMIT_ARGS=SUBMIT_ARGS,
    )

    def adapt(code: str) -> str:
        return (
            code.replace("/var/lib/walfs/main", str(main))
            .replace("/var/lib/walfs/other", str(other))
            .replace("/mnt/wal", str(mnt))
            .replace("127.0.0.1:9092", f"127.0.0.1:{port}")
        )

    def run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)

    # Where `make install` leaves a user: the default data directory mounted.
    started = run(["walfs", "mount", str(main), str(mnt)], 120)
    assert started.returncode == 0, started.stderr
    try:
        for lang, code in tour_blocks():
            if lang == "python":
                script = tmp_path / "block.py"
                script.write_text(adapt(code))
                res = run([sys.executable, str(script)], 1200)
                assert res.returncode == 0, f"{code}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
                [want] = [v for k, v in EXPECT_PY.items() if k in code]
                assert want in res.stdout, f"{code}\n{res.stdout[-3000:]}"
                continue
            for line in code.splitlines():
                if not line.strip():
                    continue
                [want] = [v for k, v in EXPECT_SH.items() if line.startswith(k)]
                cmd = adapt(line)
                if line.startswith("tail -f"):
                    # It follows forever: stopped after a while, as Ctrl-C would.
                    res = run(["timeout", "5", "bash", "-c", cmd], 60)
                    assert res.returncode == 124, res.stderr
                else:
                    res = run(["bash", "-euo", "pipefail", "-c", cmd], 120)
                    assert res.returncode == 0, f"{line}\n{res.stdout}\n{res.stderr}"
                assert want in res.stdout, f"{line}\n{res.stdout}\n{res.stderr}"
    finally:
        if is_mounted(mnt):
            pid = int(os.getxattr(mnt, "user.walfs.pid"))
            run(["walfs", "umount", str(mnt)], 60)
            if is_mounted(mnt):
                subprocess.run(["fusermount3", "-uz", str(mnt)], check=False, capture_output=True)
            if daemon_alive(pid):
                os.kill(pid, 9)
    # Both writers' records are where the tour said, and durable.
    res = run(["walfs", "mount", str(main), str(mnt)], 120)
    assert res.returncode == 0, res.stderr
    try:
        assert (mnt / "orders").read_text() == "order 42 paid\n"
        assert (mnt / "totals").read_text() == "1\n"
    finally:
        run(["walfs", "umount", str(mnt)], 60)
