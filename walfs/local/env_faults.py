"""TEST ONLY: the environment's hooks into a local engine's open, for the daemon tests
(the mount and `walfs serve` open their engine themselves). Never set them in production;
each is logged loudly when set."""

import logging
import os

from walfs.engine import settings as retention
from walfs.local.core import Engine

log = logging.getLogger("walfs")


def inject_env_faults(core: Engine) -> None:
    """WALFS_TEST_FAULT="op:errno:after" (op write|sync|alloc|reclaim) makes the core fail
    that operation after `after` successes. (Retention's clock file, CLOCK_FILE_ENV, is read
    by walfs.engine.settings.now_ms; only its warning is here.)"""
    if os.environ.get(retention.CLOCK_FILE_ENV) and not core.read_only:
        log.warning("%s is set: retention reads its clock from a file (tests only)", retention.CLOCK_FILE_ENV)
    spec = os.environ.get("WALFS_TEST_FAULT")
    if not spec or core.read_only:
        return
    op, err, after = spec.split(":")
    log.warning("WALFS_TEST_FAULT=%s: injecting faults (tests only)", spec)
    core.inject_fault(op, int(err), after=int(after))
