"""The summary line of every open of the local engine (walfs_recovery_report): what
recovery found and what it cut. Its logger, walfs.recovery, shows at the daemons' default
level (walfs/cli/mount.py). Heals: the metadata copies an open healed (issue 36)."""

import logging
import threading

RECOVERY_LOG = logging.getLogger("walfs.recovery")


def log_recovery(path: str, report: dict[str, int], streams: int, seconds: float, read_only: bool) -> None:
    """The summary line of an open (walfs_recovery_report): what recovery found and what it
    cut. A warning when a writer's open cut anything (the tail a crash left; the core names
    each stream it cut just before) or when any open quarantined damaged records (the core
    named each at error level), information otherwise. A read-only open changes
    nothing on disk: what it leaves out of its view is only information."""
    cut = bool(report["cut_records"] or report["cut_bytes"] or report["freed_blocks"])
    outcome = (
        f"cut {report['cut_records']} torn or unfinished records ({report['cut_bytes']} bytes; "
        f"{report['freed_blocks']} blocks freed)"
        if cut
        else "nothing cut"
    )
    damaged = report.get("metadata_damaged", 0)
    if damaged:
        outcome += (
            f"; {damaged} damaged metadata cop{'y' if damaged == 1 else 'ies'} served from the good copy"
            + (f", {report.get('healed', 0)} rewritten (healed)" if not read_only else "")
        )
    quarantined = report.get("quarantined", 0)
    if quarantined:
        # Damaged durable records, kept and refused to reads; the core named each one.
        outcome += f"; {quarantined} damaged records quarantined (each read of one fails)"
    RECOVERY_LOG.log(
        logging.WARNING if ((cut or damaged) and not read_only) or quarantined else logging.INFO,
        "recovered %s%s: %d streams, %d records in %d segments (%d runs, %d records checked by CRC); %s; "
        "took %.0f ms",
        path,
        " (read-only: nothing changed on disk)" if read_only else "",
        streams,
        report["records"],
        report["segments"],
        report["blocks"],
        report["verified_records"],
        outcome,
        seconds * 1000,
    )


class Heals:
    """The metadata copies (issue 36: topics.conf, cursors.manifest, a cursor file's
    slots) an open and the first reads found damaged, missing or behind while the other
    copy proved itself: a writer rewrote each from the good copy (healed), a read-only
    open served the good copy and changed nothing. Each is logged once, naming the file,
    on walfs.recovery; the engine exposes them (LocalEngine.healed_copies, the report's
    `healed_files`, the walfs_healed_copies_total metric, `walfs fsck`)."""

    def __init__(self, read_only: bool = False) -> None:
        self.read_only = read_only
        self.notes: list[str] = []
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def note(self, bad: str, why: str, good: str) -> None:
        """`bad` was damaged (`why`) and `good` proved itself; a writer has rewritten `bad`."""
        with self._lock:
            if self.read_only and bad in self._seen:  # read again and again: told once
                return
            self._seen.add(bad)
            if self.read_only:
                text = f"{bad}: {why}; served from {good} (read-only: a writer's open heals it)"
            else:
                text = f"{bad}: {why}; rewritten from {good}"
            self.notes.append(text)
        RECOVERY_LOG.warning("damaged metadata copy %s", text)

    @property
    def healed(self) -> int:
        """How many copies a writer rewrote (0 for a read-only open)."""
        return 0 if self.read_only else len(self.notes)
