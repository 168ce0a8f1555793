"""walfs fsck PATH: recovers the data directory read-only, then reads every stored record
and checks its CRC and index slot, and every cursor file; lists each metadata copy found
damaged while its other copy is good (a writer's open heals it: issue 36). PATH is a data
directory or a walfs mount point (its data directory is checked, beside the running
daemon). Exit 0 when clean, 1 when damage was found (a damaged copy too), 2 when the
directory cannot be checked at all (or the command line is wrong).
On a terminal, a progress line on stderr shows the streams, records and bytes checked.

walfs fsck --repair DAMAGED_DIR --into NEW_DIR: salvage (walfs/local/salvage.py). Copies
every intact record and cursor of DAMAGED_DIR, which may not even open, into the new data
directory NEW_DIR; DAMAGED_DIR is never written. Lists what could not be kept. Exit 0 when
everything was kept, 1 when anything was lost or renumbered, 2 when nothing could be read."""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from typing import TextIO

from walfs.cli.common import XATTR, CliError, Parser, explain, module_main, not_a_data_dir, resolve
from walfs.common.sizes import human
from walfs.engine.capabilities import Checks, Copies, has
from walfs.engine.targets import is_local
from walfs.errors import WalError, WalIOError
from walfs.open import open_engine, repair

EXIT_CANNOT_CHECK = 2


class Progress:
    """One line on a terminal, rewritten in place at most every `every` seconds and
    cleared at the end; nothing at all when `out` is not a terminal (scripts, logs)."""

    def __init__(self, out: TextIO, every: float = 0.2) -> None:
        self.out = out
        self.every = every
        self.live = _isatty(out)
        self.shown = False
        self.last = 0.0
        self.start = time.monotonic()

    def __call__(self, done: int, streams: int, records: int, nbytes: int) -> None:
        if not self.live:
            return
        now = time.monotonic()
        if now - self.last < self.every and done < streams:
            return
        self.last = now
        rate = nbytes / max(now - self.start, 1e-9)
        line = (
            f"fsck: {done}/{streams} streams, {records:,} records, {human(nbytes)} checked ({human(rate)}/s)"
        )
        try:
            self.out.write("\r\033[K" + line)
            self.out.flush()
            self.shown = True
        except OSError:
            self.live = False

    def clear(self) -> None:
        if self.shown:
            try:
                self.out.write("\r\033[K")
                self.out.flush()
            except OSError:
                pass
            self.shown = False


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def main(argv: list[str]) -> int:
    p = Parser(prog="walfs fsck", description=__doc__)
    p.add_argument("data_dir", metavar="PATH", help="a data directory or a walfs mount point")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--repair",
        action="store_true",
        help="salvage PATH into the new directory given with --into (PATH is not changed)",
    )
    p.add_argument("--into", metavar="NEW_DIR", help="with --repair: the new data directory to write")
    args = p.parse_args(argv)
    if args.repair or args.into:
        if not (args.repair and args.into):
            p.error("--repair and --into go together")
        return _repair(args.data_dir, args.into, args.json)
    try:
        data_dir = _data_dir(args.data_dir)
    except CliError as e:
        print(f"walfs fsck: {e}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    try:
        # Read-only: fsck works beside a running daemon and never changes a byte.
        engine = open_engine(data_dir, read_only=True)
    except WalIOError as e:
        if is_local(data_dir) and e.errno == errno.ENOENT and not os.listdir(data_dir):
            print(f"walfs fsck: {not_a_data_dir(data_dir)}", file=sys.stderr)
            return EXIT_CANNOT_CHECK
        return _cannot_open(data_dir, e)
    except WalError as e:
        return _cannot_open(data_dir, e)
    progress = Progress(sys.stderr)
    try:
        checker: object = engine
        if not has(checker, Checks):
            print(f"walfs fsck: {data_dir}: this engine cannot check itself", file=sys.stderr)
            return EXIT_CANNOT_CHECK
        problems = checker.verify(progress)
        report = checker.report()
        streams = len(engine.streams())
        # Metadata kept twice (issue 36): each copy that is damaged while the other proves
        # itself (a writer's open heals it), and damage with no good copy left.
        unhealed = engine.check_cursors() if has(engine, Copies) else []
        copies = engine.healed_copies() if has(engine, Copies) else []
    finally:
        progress.clear()
        engine.close()
    damaged = report.get("metadata_damaged", 0)  # the C core's copies: the catalog, segment headers
    if args.json:
        print(
            json.dumps(
                {
                    "recovery": report,
                    "streams": streams,
                    "problems": problems,
                    "damaged_copies": copies,
                    "damaged_metadata": unhealed,
                },
                indent=2,
            )
        )
    else:
        print(
            f"{data_dir}: {report['segments']} segments, {report['records']} records "
            f"in {streams} streams (org {engine.org_id}); "
            f"tail records verified: {report['verified_records']}, "
            f"incomplete tail records ignored: {report['cut_records']}"
            + (f", damaged records quarantined: {report['quarantined']}" if report.get("quarantined") else "")
        )
        if damaged:
            print(
                f"  {copies_of(damaged, 'damaged metadata copy')} (a catalog copy or segment header): "
                "served from the good copy; a writer's open rewrites them (the log names each)"
            )
        for topic, partition, offset, what in problems:
            print(f"  {topic}[{partition}] offset {offset}: {what}")
        for line in copies:
            print(f"  one copy damaged: {line}")
        for line in unhealed:
            print(f"  {line}")
        found = [copies_of(len(problems), "damaged record")] if problems else []
        found += (
            [copies_of(len(copies) + damaged, "damaged copy") + " (a writer's open heals them)"]
            if copies or damaged
            else []
        )
        found += [copies_of(len(unhealed), "damaged cursor file")] if unhealed else []
        print("; ".join(found) if found else "clean")
    return 1 if problems or copies or unhealed or damaged else 0


def copies_of(n: int, what: str) -> str:
    """'1 damaged copy', '2 damaged copies', '3 damaged records'."""
    if n == 1:
        return f"1 {what}"
    return f"{n} {what[:-1]}ies" if what.endswith("y") else f"{n} {what}s"


def _data_dir(path: str) -> str:
    """The data directory behind PATH (a mount point's own, from its xattr)."""
    target = resolve(path, "fsck")
    if target.mount is not None:
        data_dir = os.getxattr(target.mount, XATTR + "data_dir").decode()
        if not is_local(data_dir):
            raise CliError(f"{path} is a mount of {data_dir}: fsck checks local data directories")
        return data_dir
    assert target.data_dir is not None
    return target.data_dir


def _cannot_open(data_dir: str, e: WalError) -> int:
    what = e.strerror if isinstance(e, WalIOError) else str(e)
    print(f"walfs fsck: {data_dir}: {what}", file=sys.stderr)
    print(
        f"walfs fsck: to copy what is intact: walfs fsck --repair {data_dir} --into NEW_DIR", file=sys.stderr
    )
    return EXIT_CANNOT_CHECK


def _repair(src: str, dst: str, as_json: bool) -> int:
    try:
        report = repair(src, dst)
    except (WalError, OSError, ValueError) as e:
        print(f"walfs fsck --repair: {explain(e) or e}", file=sys.stderr)
        return EXIT_CANNOT_CHECK
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(
            f"{src} -> {dst}: {report.records} records in {report.streams} streams, "
            f"{report.cursors} cursors salvaged"
        )
        for loss in report.lost:
            print(f"  LOST {loss}")
        for line in report.renumbered:
            print(f"  RENUMBERED {line}")
        print(
            "everything kept"
            if not report.lost and not report.renumbered
            else f"{len(report.lost)} losses: see above"
        )
    return 1 if report.lost or report.renumbered else 0


if __name__ == "__main__":
    module_main("fsck", main)
