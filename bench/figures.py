"""The charts of docs/benchmarks.md: SVG grouped bars drawn from bench/results/*.json.

    python bench/figures.py [--results bench/results] [--out docs/figures]     # make bench-figures

No plotting library: each chart is a row of panels, each panel a y axis from 0 with a few
gridlines, groups of bars (one colour per series, the legend on top), the value above
each bar and, where the JSON has a (median, min, max) triple, a whisker from min to max.
A value the run did not measure is drawn as "n/m". One function per figure reads the
area's JSON; the JSON files say where each figure came from (date, commit, command).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from html import escape
from pathlib import Path
from typing import Any

# value: a number, (median, min, max), or None (not measured)
Value = float | tuple[float, float, float] | None
Panel = tuple[str, str, list[tuple[str, list[Value]]]]  # title, unit, [(group, one value per series)]

COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#9c9c9c", "#b07aa1", "#e15759", "#76b7b2"]
PANEL_W, PANEL_H, TOP, BOTTOM, LEFT = 380, 270, 84, 46, 58


def axis(v: float) -> tuple[float, float]:
    """(top, step) of a y axis from 0 that holds v in 3-5 steps of 1, 2, 2.5 or 5 x 10^k."""
    if v <= 0:
        return 1.0, 0.25
    base = 10 ** math.floor(math.log10(v / 4))
    step = next(m * base for m in (1, 2, 2.5, 5, 10) if m * base * 4 >= v * 1.0001)
    return step * math.ceil(v * 1.0001 / step), step


def fmt(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.3g} M"
    if v >= 1e4:
        return f"{v / 1e3:.3g} k"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def parts(v: Value) -> tuple[float | None, float | None, float | None]:
    if v is None:
        return None, None, None
    if isinstance(v, tuple):
        return v
    return float(v), None, None


def panel(x0: float, p: Panel, series: list[str], ref: float | None, pw: int) -> list[str]:
    title, unit, groups = p
    top = max(
        (hi if hi is not None else m) for _, vals in groups for m, _, hi in map(parts, vals) if m is not None
    )
    ymax, step = axis(max(top, ref or 0))
    plot_w, plot_h = pw - LEFT - 12, PANEL_H - TOP - BOTTOM
    px, py = x0 + LEFT, TOP

    def y(v: float) -> float:
        return py + plot_h * (1 - v / ymax)

    out = [f'<text x="{x0 + pw / 2}" y="{TOP - 30}" class="t">{escape(title)}</text>']
    out.append(f'<text x="{px - 44}" y="{py - 10}" class="u">{escape(unit)}</text>')
    for k in range(round(ymax / step) + 1):
        v = step * k
        out.append(f'<line x1="{px}" x2="{px + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="g"/>')
        out.append(f'<text x="{px - 5}" y="{y(v) + 4:.1f}" class="a" text-anchor="end">{fmt(v)}</text>')
    out.append(f'<line x1="{px}" x2="{px}" y1="{py}" y2="{py + plot_h}" class="ax"/>')
    out.append(f'<line x1="{px}" x2="{px + plot_w}" y1="{py + plot_h}" y2="{py + plot_h}" class="ax"/>')
    gw = plot_w / len(groups)
    bw = min(34.0, gw * 0.8 / len(series))
    for gi, (label, vals) in enumerate(groups):
        gx = px + gi * gw + (gw - bw * len(series)) / 2
        out.append(
            f'<text x="{px + gi * gw + gw / 2:.1f}" y="{py + plot_h + 16}" class="a">{escape(label)}</text>'
        )
        for si, v in enumerate(vals):
            bx = gx + si * bw
            m, lo, hi = parts(v)
            if m is None:
                out.append(f'<text x="{bx + bw / 2:.1f}" y="{py + plot_h - 4}" class="v">n/m</text>')
                continue
            out.append(
                f'<rect x="{bx + 1:.1f}" y="{y(m):.1f}" width="{bw - 2:.1f}"'
                f' height="{py + plot_h - y(m):.1f}" fill="{COLOURS[si % len(COLOURS)]}"/>'
            )
            label_y = y(m) - 4
            if lo is not None and hi is not None:
                cx = bx + bw / 2
                out.append(f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(hi):.1f}" y2="{y(lo):.1f}" class="w"/>')
                out.append(
                    f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y(hi):.1f}" y2="{y(hi):.1f}" class="w"/>'
                )
                out.append(
                    f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y(lo):.1f}" y2="{y(lo):.1f}" class="w"/>'
                )
                label_y = min(label_y, y(hi) - 4)
            out.append(f'<text x="{bx + bw / 2:.1f}" y="{label_y:.1f}" class="v">{fmt(m)}</text>')
    if ref is not None:
        out.append(f'<line x1="{px}" x2="{px + plot_w}" y1="{y(ref):.1f}" y2="{y(ref):.1f}" class="r"/>')
    return out


def chart(
    title: str, series: list[str], panels: list[Panel], note: str, ref: float | None = None, pw: int = PANEL_W
) -> str:
    """One SVG: a title, the legend, the panels side by side (`pw` wide each), a note on
    where the figures came from."""
    width = max(pw * len(panels), 560)
    height = PANEL_H + 22
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif">',
        "<style>.t{font-size:13px;font-weight:bold;text-anchor:middle}.u{font-size:10px;fill:#555}"
        ".a{font-size:10px;fill:#333;text-anchor:middle}.v{font-size:9px;fill:#222;text-anchor:middle}"
        ".g{stroke:#e4e4e4}.ax{stroke:#666}.w{stroke:#222;stroke-width:1}"
        ".r{stroke:#c00;stroke-dasharray:4 3}.n{font-size:9px;fill:#666}.l{font-size:10px}</style>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="8" y="16" style="font-size:14px;font-weight:bold">{escape(title)}</text>',
    ]
    lx = 8.0
    for i, s in enumerate(series):
        out.append(f'<rect x="{lx}" y="24" width="10" height="10" fill="{COLOURS[i % len(COLOURS)]}"/>')
        out.append(f'<text x="{lx + 14}" y="33" class="l">{escape(s)}</text>')
        lx += 24 + 6.2 * len(s)
    for i, p in enumerate(panels):
        out += panel(i * pw, p, series, ref, pw)
    if any(v is None for _, _, groups in panels for _, vals in groups for v in vals):
        note += "; n/m: not measured or not reported in that run"
    out.append(f'<text x="8" y="{height - 6}" class="n">{escape(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def triple(xs: list[float]) -> tuple[float, float, float]:
    """(median, min, max): as the JSON stores them, or computed from a list of rounds."""
    return (
        (xs[0], xs[1], xs[2])
        if len(xs) == 3 and xs[1] <= xs[0] <= xs[2]
        else (
            statistics.median(xs),
            min(xs),
            max(xs),
        )
    )


def source(run: dict[str, Any]) -> str:
    r = run["run"]
    return f"{r['date']}, commit {r['commit']}, transcribed from docs/benchmarks.md (bench/results/)"


def vs_kafka(res: Path) -> dict[str, str]:
    run = json.loads((res / "vs_kafka.json").read_text())["runs"][0]
    out = {}
    sizes = (("100 B", "100B"), ("1 KiB", "1KiB"), ("16 KiB", "16KiB"))
    for phase in ("produce", "consume"):
        panels: list[Panel] = []
        for pair, what in (
            ("default", "Kafka's default vs --fsync never"),
            ("flush1", "flush.messages=1 vs --fsync always"),
        ):
            groups = []
            for label, key in sizes:
                c = run["results"][pair][key][phase]["1p"]
                groups.append((label, [1.0, c["walfs_over_kafka"], c["null_over_kafka"]]))
            panels.append((f"{phase}, {what}", "x Kafka", groups))
        out[f"vs_kafka_{phase}.svg"] = chart(
            f"walfs serve vs Apache Kafka 4.1.1: {phase} by record size (1 producer, same-round ratios)",
            ["Kafka", "walfs", "nullkafka (a server that does nothing)"],
            panels,
            source(run) + "; dashed: Kafka = 1",
            ref=1.0,
        )
    return out


def mount(res: Path) -> dict[str, str]:
    runs = {r["name"]: r for r in json.loads((res / "mount.json").read_text())["runs"]}
    w = runs["writes"]["results"]
    series = ["walfs mount", "C libfuse passthrough", "pyfuse3 floor", "plain file"]
    one, four = w["append_1MiB_MBps"], w["append_4KiB_MBps"]
    panels: list[Panel] = [
        (
            "dd bs=1M, fsync at end",
            "MB/s",
            [("1 MiB appends", [one["mount"], one["passthrough"], one["floor"], one["plain"]])],
        ),
        (
            "dd bs=4k, fsync at end",
            "MB/s",
            [("4 KiB appends", [four["mount"], four["passthrough"], four["floor"], four["plain"]])],
        ),
        (
            "echo line >> file (bash loop)",
            "appends/s",
            [("echo", [w["echo_per_s"]["mount"], None, w["echo_per_s"]["floor"], None])],
        ),
    ]
    out = {
        "mount_writes.svg": chart(
            "Mount writes beside their baselines (same run, medians of 3 rounds)",
            series,
            panels,
            source(runs["writes"]),
        )
    }
    r = runs["reads"]["results"]
    panels = []
    for size, label in (("256MiB", "256 MiB"), ("1GiB", "1 GiB")):
        groups = [
            (f"{k} cat", [triple(r[size][k]["mount"]), triple(r[size][k]["floor"]), 1.0])
            for k in ("first", "warm", "third")
        ]
        panels.append((f"cat of a {label} file just written", "x plain file", groups))
    out["mount_reads.svg"] = chart(
        "Mount reads against a plain file written the same way (median, min-max of 3 rounds)",
        ["walfs mount", "pyfuse3 floor", "plain file"],
        panels,
        source(runs["reads"]) + "; dashed: plain file = 1",
        ref=1.0,
    )
    return out


def spark(res: Path) -> dict[str, str]:
    run = {r["name"]: r for r in json.loads((res / "spark.json").read_text())["runs"]}["sink"]
    names = [
        ("write_text", "df.write.text"),
        ("noop_floor", "no-op Python sink"),
        ("file_floor", "file floor"),
        ("file_floor_sync", "file floor + fdatasync"),
        ("sink_path", "walfs sink, path"),
        ("sink_bootstrap", "walfs sink, bootstrap"),
    ]
    rows = 200_000
    groups = []
    for size, label in (("100B", "100 B rows"), ("1KiB", "1 KiB rows")):
        s = run["results"][size]["seconds"]
        groups.append((label, [(rows / s[k][0], rows / s[k][2], rows / s[k][1]) for k, _ in names]))
    return {
        "spark_sink.svg": chart(
            "Spark writes of 200,000 rows: the walfs sink vs write.text and the floors of a PySpark sink",
            [n for _, n in names],
            [("rows per second (median, fastest-slowest of 5)", "rows/s", groups)],
            source(run),
            pw=760,
        )
    }


def engine(res: Path) -> dict[str, str]:
    single = json.loads((res / "single_append.json").read_text())["runs"][0]
    eng = json.loads((res / "engine.json").read_text())["runs"][0]["results"]["append_1k"]
    never = single["results"]["never"]
    panels: list[Panel] = []
    for case, title in (("one_per_call_handle", "one record per call"), ("batch_2000", "batches of 2,000")):
        groups = [
            (lab, [never[k][case]["walfs"], never[k][case]["walrus"]])
            for k, lab in (("100B", "100 B"), ("1KiB", "1 KiB"))
        ]
        panels.append((title, "records per CPU-s", groups))
    out = {
        "engine_single_append.svg": chart(
            "One append per call and batches: walfs vs the seed's crate walrus-rust 0.2.0 (fsync never)",
            ["walfs", "walrus-rust 0.2.0"],
            panels,
            source(single),
        )
    }
    out["engine_append.svg"] = chart(
        "Engine append_batch of 1 KiB records vs a plain file (1 GiB, median, min-max of 3 rounds)",
        ["walfs append_batch", "plain file write"],
        [
            (
                "1 GiB of 1 KiB records, fsync at end",
                "MB/s",
                [("1 KiB", [triple(eng["walfs_rounds"]), triple(eng["plain_file_rounds"])])],
            )
        ],
        source(json.loads((res / "engine.json").read_text())["runs"][0]),
    )
    return out


def cluster(res: Path) -> dict[str, str]:
    run = json.loads((res / "cluster.json").read_text())["runs"][0]
    panels: list[Panel] = []
    for k, lab in (("100B", "100 B"), ("1KiB", "1 KiB")):
        c = run["results"][k]
        panels.append(
            (
                f"{lab} records on a 3-node Kafka",
                "records/s",
                [
                    (
                        "append",
                        [triple(c["kafka_produce"]), triple(c["wal_append"]), triple(c["mount_append"])],
                    ),
                    ("read", [triple(c["kafka_consume"]), triple(c["wal_read"]), None]),
                ],
            )
        )
    return {
        "cluster.svg": chart(
            "walfs on a Kafka cluster vs Kafka's perf tools on it (median, min-max of 2 rounds)",
            ["Kafka perf tool", "walfs Wal", "walfs mount (dd)"],
            panels,
            source(run),
        )
    }


def topics(res: Path) -> dict[str, str]:
    """bench/engine/bench_topics.py: the trees' runs side by side, with Apache Kafka where
    the run measured it (disk per topic of one record and of 1,000; what else scales with
    the count, one record each)."""
    doc = json.loads((res / "topics.json").read_text())
    runs = doc["runs"]
    counts = sorted({r["topics"] for run in runs for r in run["runs"] if r["records_per_topic"] == 1})

    def row(run: dict[str, Any], n: int, r: int = 1) -> dict[str, Any]:
        return next((x for x in run["runs"] if x["topics"] == n and x["records_per_topic"] == r), {})

    def get(d: dict[str, Any], *path: str) -> float | None:
        for k in path:
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return float(d) if isinstance(d, int | float) else None

    names = [run["name"] for run in runs]
    kafka = [get(row(run, n), "apache_kafka", "du_per_topic_bytes") for run in runs for n in counts]
    series = names + (["Apache Kafka 4.1.1"] if any(v is not None for v in kafka) else [])

    def groups(
        *path: str, kafka_path: tuple[str, ...] | None = None, r: int = 1
    ) -> list[tuple[str, list[Value]]]:
        out: list[tuple[str, list[Value]]] = []
        for n in counts:
            vals: list[Value] = [get(row(run, n, r), *path) for run in runs]
            if len(series) > len(names):
                k = [get(row(run, n, r), *kafka_path) for run in runs] if kafka_path else []
                vals.append(next((v for v in reversed(k) if v is not None), None))  # the newest run's
            out.append((f"{n:,} topics", vals))
        return out

    disk = ("apache_kafka", "du_per_topic_bytes")
    disks: list[Panel] = [
        ("one record (15 bytes)", "bytes", groups("api", "du_per_topic_bytes", kafka_path=disk)),
        ("1,000 records (15 KB)", "bytes", groups("api", "du_per_topic_bytes", kafka_path=disk, r=1000)),
    ]
    panels: list[Panel] = [
        ("open after a clean close", "s", groups("api", "open_clean", "open_s")),
        ("open after SIGKILL", "s", groups("api", "open_after_sigkill", "open_s")),
        ("private memory per stream", "bytes", groups("api", "anon_per_stream_bytes")),
        ("ls of the mount root", "s", groups("mount", "ls_first_s")),
        (
            "one Metadata request, all topics",
            "s",
            groups("mount", "kafka", "metadata_s", kafka_path=("apache_kafka", "kafka", "metadata_s")),
        ),
    ]
    note = "; ".join(f"{run['name']}: {run['run']['date']}, commit {run['run']['commit']}" for run in runs)
    return {
        "topics_disk.svg": chart(
            "Disk per topic (du), beside Apache Kafka on the same machine (bench/engine/bench_topics.py)",
            series,
            disks,
            note,
            pw=420,
        ),
        "topics.svg": chart(
            "Many topics of one record each: what scales with the count (bench/engine/bench_topics.py)",
            series,
            panels,
            note,
            pw=300,
        ),
    }


def cursors(res: Path) -> dict[str, str]:
    """bench/engine/bench_cursors.py: a group's first commits one by one, the journaled
    manifest against the manifest rewritten whole (median, min-max of the rounds)."""
    doc = json.loads((res / "cursors.json").read_text())
    rows = [row for run in doc["runs"] for row in run["runs"]]

    def val(row: dict[str, Any], tree: str, key: str) -> Value:
        got = [r[key] for r in row.get(tree, [])]
        if not got:
            return None
        got.sort()
        return (got[len(got) // 2], got[0], got[-1]) if len(got) > 1 else float(got[0])

    def groups(key: str) -> list[tuple[str, list[Value]]]:
        return [(f"{row['topics']:,} topics", [val(row, "new", key), val(row, "old", key)]) for row in rows]

    panels: list[Panel] = [
        ("bytes written per first commit", "bytes", groups("first_written_per_commit_bytes")),
        ("first commits per second", "commits/s", groups("first_per_s")),
        ("last tenth / first tenth of them", "ratio", groups("growth")),
    ]
    run = doc["runs"][0]["run"]
    return {
        "cursors.svg": chart(
            "A group's first commit of every topic, one by one (bench/engine/bench_cursors.py)",
            ["manifest journal (now)", "manifest rewritten whole (before)"],
            panels,
            f"{run['date']}, commit {run['commit']}; median, min-max of 3 rounds; 100,000 topics: 1 round",
            pw=340,
        )
    }


FIGURES = (vs_kafka, mount, spark, engine, cluster, topics, cursors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = Path(__file__).resolve().parent
    ap.add_argument("--results", type=Path, default=here / "results")
    ap.add_argument("--out", type=Path, default=here.parent / "docs" / "figures")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for make in FIGURES:
        for name, svg in make(args.results).items():
            (args.out / name).write_text(svg)
            print(args.out / name)


if __name__ == "__main__":
    main()
