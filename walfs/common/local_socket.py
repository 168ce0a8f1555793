"""The daemon's local socket: every walfs daemon that owns a data directory (`walfs mount`,
`walfs serve`) listens on the AF_UNIX socket DATA_DIR/kafka.sock, with no flag, and
serves there the same Kafka-wire protocol as its TCP listener (walfs.kafka.listener).
It is how a process on the machine writes into a WAL that a daemon owns, knowing only
its path: the Spark sink's `option("path", ...)` (walfs.spark.sink_target).

Rules (one home each):
- Who may connect: the socket file's mode follows the data directory's: the owner
  always (read and write), the group and others when the directory lets them write
  (w and x) into it, as they could then open the WAL themselves when no daemon runs.
  Its group is the directory's. A private (0700) directory admits its owner only.
- Which org a connection sees: the daemon's (--org-id) unless the client's first
  request names another with a client id ending in ORG_TAG + N (client_id_for): a
  client that could open the directory itself could open any org in it, so the socket
  gives it the same choice, without SASL (the TCP listener's SASL rules are untouched).
- Life: bound once the WAL is open (its lock held), under a temporary name, given its
  mode, then renamed over whatever is there: a socket left by a daemon that was killed
  is stale (nobody listens: ECONNREFUSED) and is replaced; removed at a clean stop,
  before the WAL closes. While a connection succeeds, a daemon owns the directory.
- sun_path holds 107 bytes: a longer DATA_DIR/kafka.sock is reached through an O_PATH
  descriptor of the directory (/proc/self/fd/N/kafka.sock), by the daemon and by clients.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass

SOCKET_NAME = "kafka.sock"
_TEMP_NAME = SOCKET_NAME + ".new"
# The longest path sun_path takes (108 bytes with the terminating NUL).
SUN_PATH_MAX = 107
# A client id ending in this tag and a number picks the org on the local socket.
ORG_TAG = ";org_id="
_ORG_RE = re.compile(re.escape(ORG_TAG) + r"(-?\d{1,10})$")


def socket_path(data_dir: str) -> str:
    return os.path.join(os.path.abspath(data_dir), SOCKET_NAME)


def client_id_for(name: str, org_id: int) -> str:
    """The client id that asks the local socket for `org_id`'s topics."""
    return f"{name}{ORG_TAG}{org_id}"


def org_of_client_id(client_id: str | None) -> int | None:
    """The org a local client's id names (client_id_for), None: the daemon's."""
    if not client_id:
        return None
    m = _ORG_RE.search(client_id)
    return int(m.group(1)) if m else None


def _sun_path(data_dir: str, name: str, fd: int) -> str:
    """An address for bind/connect of `name` in data_dir (open as `fd`): the plain path
    when it fits sun_path, else through /proc/self/fd."""
    plain = os.path.join(os.path.abspath(data_dir), name)
    return plain if len(os.fsencode(plain)) <= SUN_PATH_MAX else f"/proc/self/fd/{fd}/{name}"


def _open_dir(data_dir: str) -> int:
    return os.open(data_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


@contextlib.contextmanager
def _address(data_dir: str, name: str) -> Iterator[tuple[str, int]]:
    """(_sun_path of `name`, a descriptor of data_dir for the *at calls)."""
    fd = _open_dir(data_dir)
    try:
        yield _sun_path(data_dir, name, fd), fd
    finally:
        os.close(fd)


def socket_mode(dir_mode: int) -> int:
    """The socket's mode for a data directory of mode `dir_mode` (module doc)."""
    mode = 0o600
    if dir_mode & 0o030 == 0o030:
        mode |= 0o060
    if dir_mode & 0o003 == 0o003:
        mode |= 0o006
    return mode


@dataclass
class Bound:
    """The daemon's listening socket and the file it is bound to."""

    data_dir: str
    sock: socket.socket
    inode: int

    def close(self) -> None:
        """Removes DATA_DIR/kafka.sock if it is still this one (a clean stop; a newer
        daemon's is left alone), and closes the socket."""
        try:
            with _address(self.data_dir, SOCKET_NAME) as (_, fd):
                st = os.stat(SOCKET_NAME, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISSOCK(st.st_mode) and st.st_ino == self.inode:
                    os.unlink(SOCKET_NAME, dir_fd=fd)
        except OSError:
            pass
        finally:
            self.sock.close()


def bind(data_dir: str, backlog: int = 128) -> Bound:
    """The daemon's listening socket at DATA_DIR/kafka.sock (module doc); the caller
    holds the WAL's lock, so anything at that name is stale and replaced."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        with _address(data_dir, _TEMP_NAME) as (addr, fd):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_TEMP_NAME, dir_fd=fd)  # left by a daemon killed right here
            sock.bind(addr)
            try:
                st = os.stat(fd)
                os.chmod(_TEMP_NAME, socket_mode(st.st_mode), dir_fd=fd)
                with contextlib.suppress(PermissionError):
                    os.chown(_TEMP_NAME, -1, st.st_gid, dir_fd=fd)
                sock.listen(backlog)
                inode = os.stat(_TEMP_NAME, dir_fd=fd, follow_symlinks=False).st_ino
                os.rename(_TEMP_NAME, SOCKET_NAME, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(_TEMP_NAME, dir_fd=fd)
                raise
    except BaseException:
        sock.close()
        raise
    return Bound(os.path.abspath(data_dir), sock, inode)


class NotServed(OSError):
    """No daemon serves the data directory (no socket, or a stale one)."""


def connect(data_dir: str, timeout: float | None = None) -> socket.socket:
    """A connection to the daemon that owns data_dir. NotServed when none listens (no
    socket file, or a stale one: ECONNREFUSED); PermissionError when the socket's mode
    (the directory's, module doc) does not admit this user."""
    try:
        fd = _open_dir(data_dir)
    except OSError as e:
        # No such directory, or one this user cannot reach: no daemon to talk to (opening
        # the directory itself then says what is wrong).
        raise NotServed(e.errno or errno.ENOENT, f"no walfs daemon serves {data_dir}: {e}") from e
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        sock.connect(_sun_path(data_dir, SOCKET_NAME, fd))
    except (FileNotFoundError, ConnectionRefusedError) as e:
        sock.close()
        raise NotServed(e.errno or errno.ENOENT, f"no walfs daemon serves {data_dir}: {e}") from e
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(fd)
    return sock


def served(data_dir: str) -> bool:
    """Whether a daemon serves data_dir now (its socket accepts a connection)."""
    try:
        connect(data_dir, timeout=5).close()
    except NotServed:
        return False
    except OSError:
        return True  # it exists and listens, but not for us: connect() says why
    return True
