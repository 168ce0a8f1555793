"""The summary line of every open of the local engine (walfs_recovery_report): what
recovery found and what it cut. Its logger, walfs.recovery, shows at the daemons' default
level (walfs/cli/mount.py)."""

import logging

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
            f"; {damaged} damaged metadata copies served from the good copy"
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
