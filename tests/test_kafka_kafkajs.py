"""KafkaJS (npm, run with node) against `walfs serve` (issue 12): an idempotent producer
sends with every codec (gzip built in; snappy through kafkajs-snappy; lz4 as an LZ4 frame
around lz4-wasm-nodejs; zstd through zstd-codec: tests/js/kafkajs_client.js), a consumer
group reads all five topics and commits; the admin client fetches the offsets, alters and
describes topic configs (compaction refused), adds partitions and deletes records. The
packages come from tests/js/package.json (`make testdeps` runs npm install there)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kafka_harness import REPO, SMALL_WAL_ARGS, ServeProcess

import walfs

JS = REPO / "tests" / "js"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
N = 200


def test_kafkajs_every_codec_group_commit_and_admin_offsets(tmp_path: Path) -> None:
    assert (JS / "node_modules" / "kafkajs").is_dir(), "run `make testdeps` (npm install in tests/js)"
    serve = ServeProcess(tmp_path / "data", *SMALL_WAL_ARGS)
    try:
        res = subprocess.run(
            ["node", str(JS / "kafkajs_client.js"), serve.bootstrap, str(tmp_path / "out.json")],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        code, err = serve.stop()
    assert res.returncode == 0, f"{res.stderr}\nwalfs serve:\n{err[-3000:]}"
    out = json.loads((tmp_path / "out.json").read_text())
    for codec in CODECS:
        assert out["produced"][codec] == [{"partition": 0, "baseOffset": "0", "error": 0}]
        got = sorted(out["consumed"][codec], key=lambda r: int(r[0]))
        assert [int(r[0]) for r in got] == list(range(N))
        for i, (_off, key, value, header, ts) in enumerate(got):
            assert key == f"k{i % 5}" and header == str(i) and ts == str(1_700_000_000_000 + i)
            assert value == (None if i == N - 1 else f"{codec} record {i} " * 4)
        assert out["committed"][codec] == [[0, str(N), None]]
    # The admin client: topic configs (compaction refused), partitions, record deletion.
    assert out["configs"] == [["cleanup.policy", "delete"], ["retention.ms", "86400000"]]
    assert out["compact"] == "INVALID_CONFIG"
    assert out["partitions"] == 3
    assert out["afterDelete"] == [[0, "50", str(N)]]
    with walfs.Wal(str(tmp_path / "data")) as wal:
        for codec in CODECS:
            low = 50 if codec == "gzip" else 0  # the admin client deleted js-gzip's records below 50
            recs = wal.read_records(f"js-{codec}", low, max_records=N + 1)
            assert len(recs) == N - low and recs[-1].value is None and recs[0].key == b"k%d" % (low % 5)
            assert wal.engine.committed("js-group", f"js-{codec}", 0) == (N, "")
        assert wal.info("js-gzip").low_watermark == 50 and wal.retention("js-none").ms == 86_400_000
