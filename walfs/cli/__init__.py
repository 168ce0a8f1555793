"""The `walfs` command: one small module per verb, loaded only when used. Every verb runs
through walfs.cli.common.run_verb: one-line errors, the exit codes documented there."""

import importlib
import os
import sys

from walfs.cli.common import EXIT_USAGE, run_verb, version

VERBS = {
    "mount": ("walfs.cli.mount", "mount a data directory as a file tree"),
    "umount": ("walfs.cli.umount", "make a mount durable, unmount it and wait for its daemon"),
    "serve": ("walfs.cli.serve", "serve a data directory to Kafka clients without a mount"),
    "fsck": ("walfs.cli.fsck", "check every record of a data directory"),
    "info": ("walfs.cli.info", "list the topics of a data directory or mount with their watermarks"),
    "trim": ("walfs.cli.trim", "drop a topic's records below an offset (mounted or not)"),
    "retention": ("walfs.cli.retention", "show or set a topic's retention (mounted or not)"),
    "groups": ("walfs.cli.groups", "list, describe, reset or delete consumer groups (mounted or not)"),
    "kafka-user": ("walfs.cli.kafka_user", "add, remove or list the Kafka listener's SASL users"),
}


def usage() -> str:
    lines = ["usage: walfs [--version] [--debug] VERB [options]", "", "verbs:"]
    lines += [f"  {verb:<11} {text}" for verb, (_mod, text) in VERBS.items()]
    lines += [
        "",
        "options:",
        "  -V, --version  print the version of walfs",
        "  --debug        print the traceback of an unexpected error (also: WALFS_DEBUG=1)",
        "",
        "`walfs VERB --help` for the options of a verb. Exit status: 0 done, 1 failed (the",
        "line on stderr says why), 2 a wrong command line.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    while args and args[0] == "--debug":
        os.environ["WALFS_DEBUG"] = "1"  # also reaches a mount's daemon
        args = args[1:]
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else EXIT_USAGE
    verb = args[0]
    if verb in ("-V", "--version", "version"):
        print(f"walfs {version()}")
        return 0
    if verb not in VERBS:
        what = "option" if verb.startswith("-") else "verb"
        print(
            f"walfs: unknown {what} {verb!r} (verbs: {', '.join(VERBS)})\n"
            "Try 'walfs --help' for more information.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    module = importlib.import_module(VERBS[verb][0])
    return run_verb(verb, module.main, args[1:])
