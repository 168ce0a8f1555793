"""`walfs kafka-user add NAME --org N --config FILE`: writes a user's SCRAM credentials
(SCRAM-SHA-256 and SCRAM-SHA-512: salted, iterated; never the password) into the Kafka
listener's auth config file, creating it (mode 0600) if missing. `remove` and `list` too.
A running listener picks the change up at the next authentication.

The password is read from stdin (one line; `--password-stdin` is implied when stdin is not a
terminal) or asked for on the terminal, never taken from the command line, where other
users could see it in the process list."""

from __future__ import annotations

import argparse
import getpass
import sys

from walfs.kafka.auth_config import AuthConfigError, read_config, write_user
from walfs.kafka.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS, make_credential


def build_parser() -> argparse.ArgumentParser:
    from walfs.cli.common import Parser

    p = Parser(prog="walfs kafka-user", description="The Kafka listener's SASL users.")
    sub = p.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="add a user or replace its password and org")
    add.add_argument("name", help="the user name (no ':')")
    add.add_argument("--org", type=int, required=True, help="the org_id whose topics and groups it sees")
    add.add_argument("--config", required=True, metavar="FILE", help="the auth config file (JSON)")
    add.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations ({MIN_ITERATIONS}..{MAX_ITERATIONS}, default {DEFAULT_ITERATIONS})",
    )
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    rm = sub.add_parser("remove", help="remove a user")
    rm.add_argument("name", help="the user to remove")
    rm.add_argument("--config", required=True, metavar="FILE", help="the auth config file (JSON)")
    ls = sub.add_parser("list", help="list users and their orgs")
    ls.add_argument("--config", required=True, metavar="FILE", help="the auth config file (JSON)")
    return p


def _password(from_stdin: bool) -> str:
    if from_stdin or not sys.stdin.isatty():
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise AuthConfigError("the passwords differ")
    return first


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.action == "list":
            users = read_config(args.config).get("users", {})
            for name in sorted(users):
                entry = users[name]
                print(f"{name}\torg {entry.get('org_id')}\t{','.join(sorted(entry.get('scram', {})))}")
            return 0
        if args.action == "remove":
            write_user(args.config, args.name, 0, [], remove=True)
            return 0
        if not args.name or ":" in args.name:
            raise AuthConfigError(f"bad user name {args.name!r}")
        password = _password(args.password_stdin)
        if not password:
            raise AuthConfigError("empty password")
        creds = [make_credential(m, password, args.iterations) for m in MECHANISMS]
        write_user(args.config, args.name, args.org, creds)
    except (AuthConfigError, ValueError) as e:
        print(f"walfs kafka-user: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from walfs.cli.common import module_main

    module_main("kafka-user", main)
