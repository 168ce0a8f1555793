"""The local engine's background duty: one thread that runs a maintenance pass (retention,
then reclamation: LocalEngine._maintain) every `every` seconds, or at once when woken (a
size-limited stream is charged for more files than a pass keeps, an append waits for room,
a setting changed). Background is the one owner of that thread: start() starts it, stop()
ends it (LocalEngine.close(), and walfs.local.debug's power cut), and wait_for_pass() lets
a caller wait for the next pass to end."""

import logging
import threading
from collections.abc import Callable

from walfs.errors import WalClosedError

log = logging.getLogger("walfs")


class Background:
    def __init__(self, work: Callable[[], None]) -> None:
        self._work = work  # one pass; WalClosedError ends the thread
        self._stop = threading.Event()
        self._wake = threading.Event()
        # passes done (ok or failed) and the last one's error, under _pass_done
        self._pass_done = threading.Condition()
        self.passes = 0
        self.last_error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self, every: float) -> None:
        self._thread = threading.Thread(target=self._run, args=(every,), name="walfs-bg", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the thread (it finishes the pass it is in); idempotent, and a no-op on an
        engine that never started it (read-only)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def running(self) -> bool:
        """Started and not stopped: a waiter for room can expect another pass."""
        return self._thread is not None and not self._stop.is_set()

    def wake(self) -> None:
        """Runs the next pass now rather than at the next timer."""
        self._wake.set()

    def wait_for_pass(self, timeout: float) -> None:
        """Wakes the thread and waits for the next pass to end (or the timeout)."""
        with self._pass_done:
            seen = self.passes
            self._wake.set()
            self._pass_done.wait_for(lambda: self.passes > seen, timeout)

    def _run(self, every: float) -> None:
        while True:
            self._wake.wait(every)
            self._wake.clear()
            if self._stop.is_set():
                self._finished(None)
                return
            error: BaseException | None = None
            try:
                self._work()
            except WalClosedError:
                self._finished(None)
                return
            except Exception as e:  # a background failure must not kill the worker silently
                log.exception("walfs background work failed")
                error = e
            self._finished(error)

    def _finished(self, error: BaseException | None) -> None:
        with self._pass_done:
            self.passes += 1
            self.last_error = error
            self._pass_done.notify_all()
