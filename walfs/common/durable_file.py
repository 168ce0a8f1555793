"""The one atomic, durable replacement of a small file: write <tmp>, fsync it, rename it
over the file, fsync the directory (and, after it, any directories the caller just made).
A crash leaves the old content or the new, never a mix; a leftover <tmp> is the caller's to
ignore. Used by the cursor files and their manifest (walfs/local/cursors.py), topics.conf
(walfs/local/settings_file.py) and the Kafka users file (walfs/kafka/auth_config.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable


def fsync_dir(path: str) -> None:
    """Makes a directory's entries (a rename, a new or removed name) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durable(
    path: str,
    data: bytes | str,
    *,
    tmp: str | None = None,
    mode: int = 0o666,
    then_fsync: Iterable[str] = (),
) -> None:
    """Replaces `path` by `data`, atomically and durably. `tmp` names the temporary file
    (default "<path>.tmp.<thread id>", so that threads never share one); `mode` is the new
    file's (before the umask); `then_fsync` lists directories to fsync after the file's own
    (new parents: their entries must be durable too). The temporary file is removed when
    the write fails before the rename."""
    tmp = f"{path}.tmp.{threading.get_ident()}" if tmp is None else tmp
    raw = data.encode() if isinstance(data, str) else data
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    for d in then_fsync:
        fsync_dir(d)
