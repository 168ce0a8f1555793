"""The watch() registry both engines use (LogEngine.watch's contract)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from walfs.engine.types import Change


class Watchers:
    """The watch() registry both engines use: copy on write, so notify() reads without a
    lock from any thread; truthy while anyone watches (appends skip the work otherwise).
    `active` says the same as a plain attribute, for the single-append hot path (a
    __bool__ call costs that path a Python frame)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fns: list[tuple[int, Callable[[Change], None]]] = []  # (org_id, fn)
        self.active = False

    def __bool__(self) -> bool:
        return self.active

    def add(self, fn: Callable[[Change], None], org_id: int) -> Callable[[], None]:
        """fn gets the changes of org_id's streams (and those of org -1: the close)."""
        entry = (org_id, fn)
        with self._lock:
            self._fns = [*self._fns, entry]
            self.active = True

        def stop() -> None:
            with self._lock:
                self._fns = [w for w in self._fns if w is not entry]
                self.active = bool(self._fns)

        return stop

    def notify(self, change: Change) -> None:
        for org_id, fn in self._fns:
            if change.org_id in (org_id, -1):
                fn(change)
