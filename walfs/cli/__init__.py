"""The `walfs` command: one small module per verb, loaded only when used."""

import importlib
import sys

VERBS = {
    "mount": ("walfs.cli.mount", "mount a data directory as a file tree"),
    "umount": ("walfs.cli.umount", "make a mount durable, unmount it and wait for its daemon"),
    "serve": ("walfs.cli.serve", "serve a data directory to Kafka clients without a mount"),
    "fsck": ("walfs.cli.fsck", "check every record of a data directory"),
    "info": ("walfs.cli.info", "list the topics of a data directory with their watermarks"),
    "trim": ("walfs.cli.trim", "drop a topic's records below an offset (mounted or not)"),
    "retention": ("walfs.cli.retention", "show or set a topic's retention (mounted or not)"),
    "groups": ("walfs.cli.groups", "list, describe, reset or delete consumer groups (mounted or not)"),
    "kafka-user": ("walfs.cli.kafka_user", "add, remove or list the Kafka listener's SASL users"),
}


def usage() -> str:
    lines = ["usage: walfs VERB [options]", "", "verbs:"]
    lines += [f"  {verb:<11} {text}" for verb, (_mod, text) in VERBS.items()]
    lines.append("\n`walfs VERB --help` for the options of a verb.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    verb = args[0]
    if verb not in VERBS:
        print(f"walfs: unknown verb {verb!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(VERBS[verb][0])
    return int(module.main(args[1:]))
