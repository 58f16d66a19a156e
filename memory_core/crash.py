"""Kill points for the crash-safety harness: ``crash_point(name)`` is a no-op unless asked.

The pipeline claims that a run killed at any point converges, on rerun, to the state an
uninterrupted run reaches (deterministic ids, upserts, the stage ledger). That claim is only
worth something if it is tested by really killing the process, so stages and flows mark their
boundaries and a point inside each writing stage with ``crash_point("stage.where")``. The
harness (tests/flows/test_crash_nightly.py) sets ``MEMCTL_KILL_AT=<name>`` or
``MEMCTL_KILL_AT=<name>#<n>`` (the n-th time the point is reached in this process) and the
process sends itself SIGKILL there: no cleanup, no finally blocks, like a power cut or the
OOM killer. Unset, the cost is one environment lookup.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["KILL_ENV", "crash_point"]

KILL_ENV = "MEMCTL_KILL_AT"

_hits: dict[str, int] = {}
_lock = threading.Lock()


def crash_point(name: str) -> None:
    """SIGKILL this process if ``MEMCTL_KILL_AT`` names this point (and hit count)."""
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    target, _, nth = spec.partition("#")
    if target != name:
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        hit = _hits[name]
    if hit == (int(nth) if nth else 1):
        os.kill(os.getpid(), signal.SIGKILL)
