"""Broker settings from `walfs serve --kafka-config`, kcat against the admin side (auto-created
partitions, the log start after DeleteRecords), and refused settings at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka_harness import REPO, SMALL_WAL_ARGS, ServeProcess


def kcat(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_serve_kafka_config_and_kcat(tmp_path: Path) -> None:
    serve = ServeProcess(
        tmp_path / "data",
        *SMALL_WAL_ARGS,
        "--kafka-config",
        "num.partitions=4",
        "--kafka-config",
        "message.max.bytes=2000",
        "--kafka-config",
        "log.retention.ms=86400000",
    )
    try:
        b = serve.bootstrap
        kcat("-b", b, "-P", "-t", "auto", "-p", "0", stdin="".join(f"line{i}\n" for i in range(10)))
        meta = kcat("-b", b, "-L", "-t", "auto")
        assert 'topic "auto" with 4 partitions' in meta, meta
        a = AdminClient({"bootstrap.servers": b})
        [fut] = a.describe_configs([ConfigResource("topic", "auto")]).values()
        got = {n: e.value for n, e in fut.result(15).items()}
        assert got["retention.ms"] == "86400000" and got["max.message.bytes"] == "2000"
        [fut] = a.delete_records([TopicPartition("auto", 0, 4)]).values()
        assert fut.result(15).low_watermark == 4
        # kcat -Q / -o beginning see the new log start.
        out = kcat("-b", b, "-C", "-t", "auto", "-p", "0", "-o", "beginning", "-e", "-f", "%o %s\n")
        assert out.splitlines() == [f"{i} line{i}" for i in range(4, 10)]
        # A record above message.max.bytes is refused (kcat reports the delivery failure).
        big = subprocess.run(
            ["kcat", "-b", b, "-P", "-t", "auto", "-p", "0"],
            input="x" * 3000 + "\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "message size too large" in big.stderr.lower(), big.stderr
        assert kcat("-b", b, "-Q", "-t", "auto:0:-1").split()[-1] == "10"
    finally:
        code, err = serve.stop()
    assert code == 0, err


def test_serve_refuses_bad_kafka_config(tmp_path: Path) -> None:
    for bad in ("num.partitions=0", "no.such.setting=1", "auto.create.topics.enable=maybe"):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "walfs.cli.serve",
                str(tmp_path / "d"),
                "--kafka-listen",
                "127.0.0.1:0",
                "--kafka-config",
                bad,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
        )
        assert res.returncode == 2 and "--kafka-config" in res.stderr, (bad, res.stderr)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "walfs.cli.serve",
            str(tmp_path / "d"),
            "--kafka-listen",
            "127.0.0.1:0",
            "--retention-ms",
            "1000",
            "--kafka-config",
            "log.retention.ms=2000",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert res.returncode == 2 and "disagree" in res.stderr, res.stderr


def test_mount_options_carry_broker_settings() -> None:
    """`walfs mount --kafka-config` and `-o kafka_config=NAME:VALUE` (fstab, systemd conf)."""
    import pytest

    from walfs.cli.mount import build_parser, config_from_args

    args = build_parser().parse_args(
        ["d", "m", "--kafka-config", "num.partitions=3", "-o", "kafka_config=message.max.bytes:5000,noatime"]
    )
    config, _ = config_from_args(args)
    kc = config.kafka_config  # type: ignore[attr-defined]
    assert (kc.num_partitions, kc.message_max_bytes) == (3, 5000)
    args = build_parser().parse_args(["d", "m", "-o", "kafka_config=log.retention.ms:60000"])
    config, _ = config_from_args(args)
    assert config.retention_ms == 60000  # type: ignore[attr-defined]
    from walfs.cli.common import UsageError

    with pytest.raises(UsageError, match="kafka-config"):
        config_from_args(build_parser().parse_args(["d", "m", "-o", "kafka_config=num.partitions:0"]))
