"""Network addresses written by people, parsed in one place: ``HOST:PORT`` (``[::1]:9092``
for IPv6). Used by the Kafka listener's --kafka-listen, the metrics endpoint's
--metrics-listen and the Spark source's bootstrap option."""

from __future__ import annotations


def parse_listen_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for IPv6) -> (host, port). Port 0 = any free port."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    p = int(port)
    if p > 65535:
        raise ValueError(f"port {p} out of range")
    return host, p


def parse_bootstrap(text: str) -> tuple[str, int]:
    """ "host:port" (IPv6 as "[::1]:9092") -> (host, port) of a server to connect to (port
    1..65535); the first of a comma list."""
    first = text.split(",")[0].strip()
    try:
        host, port = parse_listen_address(first)
    except ValueError:
        port = 0
    if not port:
        raise ValueError(f'bootstrap must be "host:port", not {text!r}')
    return host, port
