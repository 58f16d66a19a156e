"""One pipeline run per home at a time: a lease row in the DuckDB control plane.

Two consolidations on one home would both read the same unclustered episodes and race on the
same clusters and candidates; the stage ledger makes a *rerun* converge, not two concurrent
runs. So a run takes the ``pipeline`` lease first. The lease is a row (holder run id, pid,
host, expires_at) rather than a Prefect concurrency limit because it must hold however the
run was started (``memctl consolidate`` on the ephemeral server, ``memctl serve``, a worker)
and because the ephemeral server forgets its limits.

Mutual exclusion comes from DuckDB itself: only one process at a time can hold the file
read-write, so "read the row, take it if free" inside one transaction is atomic across
processes. A holder renews the lease every ``ttl/4`` from a daemon thread while it runs. A lease
is free when it has expired (its holder stopped renewing: killed, frozen, host gone) or when
its holder is a process on this host that no longer exists (a SIGKILLed run is taken over at
once instead of after the ttl). Wall-clock time is used, never the run's ``--now``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from memory_core.errors import MetaLocked, TransientError
from memory_core.stores.meta import MetaStore

__all__ = ["Lease", "LeaseHeld", "LeaseInfo", "acquire", "current_holder", "hold", "is_live"]

logger = logging.getLogger(__name__)

PIPELINE = "pipeline"


@dataclass(frozen=True)
class LeaseInfo:
    """Who holds a lease, as stored."""

    name: str
    holder: str
    pid: int | None
    host: str | None
    flow: str | None
    acquired_at: datetime | None
    expires_at: datetime

    def describe(self) -> str:
        return (
            f"run {self.holder} ({self.flow or 'unknown flow'}, pid {self.pid} on {self.host}, "
            f"since {_fmt(self.acquired_at)}, lease until {_fmt(self.expires_at)})"
        )


class LeaseHeld(TransientError):
    """Another run holds the home's lease; names it, so the operator knows what to wait for."""

    def __init__(self, name: str, info: LeaseInfo, waited_s: float) -> None:
        self.info = info
        waited = f" after waiting {waited_s:.0f} s" if waited_s > 0 else ""
        super().__init__(
            f"another run holds the {name!r} lease of this home{waited}: {info.describe()}; "
            "it is taken over once that run ends or its lease expires"
        )


def _fmt(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value else "?"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _row_info(row: tuple) -> LeaseInfo:
    name, holder, pid, host, flow, acquired_at, expires_at = row
    return LeaseInfo(name, holder, pid, host, flow, acquired_at, expires_at)


def current_holder(meta: MetaStore, name: str = PIPELINE) -> LeaseInfo | None:
    """The stored lease (it may have expired), or None."""
    with meta.connect() as con:
        row = con.execute(
            """SELECT name, holder, pid, host, flow, acquired_at, expires_at
            FROM leases WHERE name = ?""",
            [name],
        ).fetchone()
    return _row_info(row) if row else None


def is_live(info: LeaseInfo, now: datetime | None = None) -> bool:
    """Whether the stored lease still has a holder: not expired, and not held by a process
    of this host that no longer exists (SIGKILLed)."""
    return not _free(info, now or datetime.now(UTC), holder="")


def _free(info: LeaseInfo, now: datetime, holder: str) -> bool:
    if info.holder == holder or info.expires_at <= now:
        return True
    dead_here = info.host == socket.gethostname() and info.pid and not _pid_alive(info.pid)
    return bool(dead_here)


def _try_take(
    meta: MetaStore, name: str, holder: str, flow: str, ttl_s: float
) -> tuple[bool, LeaseInfo | None]:
    now = datetime.now(UTC)
    with meta.transaction() as con:
        row = con.execute(
            """SELECT name, holder, pid, host, flow, acquired_at, expires_at
            FROM leases WHERE name = ?""",
            [name],
        ).fetchone()
        info = _row_info(row) if row else None
        if info is not None and not _free(info, now, holder):
            return False, info
        con.execute(
            """INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, pid = excluded.pid,
              host = excluded.host, flow = excluded.flow, acquired_at = excluded.acquired_at,
              renewed_at = excluded.renewed_at, expires_at = excluded.expires_at""",
            [name, holder, os.getpid(), socket.gethostname(), flow, now, now,
             now + timedelta(seconds=ttl_s)],
        )  # fmt: skip
    if info is not None and info.holder != holder:
        logger.warning("took over the %r lease from %s", name, info.describe())
    return True, info


class Lease:
    """A held lease; renews itself in a daemon thread until ``release()``."""

    def __init__(self, meta: MetaStore, name: str, holder: str, ttl_s: float) -> None:
        self.meta = meta
        self.name = name
        self.holder = holder
        self.ttl_s = ttl_s
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{name}", daemon=True)
        self._thread.start()

    def renew(self) -> bool:
        """Push expires_at forward; False (and ``lost``) if someone else took the lease."""
        now = datetime.now(UTC)
        with self.meta.transaction() as con:
            row = con.execute(
                """UPDATE leases SET renewed_at = ?, expires_at = ?
                WHERE name = ? AND holder = ? RETURNING name""",
                [now, now + timedelta(seconds=self.ttl_s), self.name, self.holder],
            ).fetchone()
        if row is None:
            self.lost = True
        return row is not None

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 4):
            try:
                if not self.renew():
                    logger.error("lease %r of run %s was taken over", self.name, self.holder)
                    return
            except Exception:  # a lock held for a moment: try again at the next tick
                logger.warning("could not renew lease %r", self.name, exc_info=True)

    def release(self) -> None:
        """Stop renewing and free the lease (only if still ours)."""
        self._stop.set()
        self._thread.join(timeout=self.ttl_s)
        with self.meta.transaction() as con:
            con.execute(
                "DELETE FROM leases WHERE name = ? AND holder = ?", [self.name, self.holder]
            )


def acquire(
    meta: MetaStore,
    *,
    holder: str,
    flow: str,
    ttl_s: float,
    wait_s: float = 0.0,
    name: str = PIPELINE,
    poll_s: float = 1.0,
) -> Lease:
    """Take the lease, waiting up to ``wait_s``; raise ``LeaseHeld`` naming the holder."""
    t0 = time.monotonic()
    while True:
        try:
            taken, info = _try_take(meta, name, holder, flow, ttl_s)
        except MetaLocked:  # another process has the file open: busy, like a held lease
            if time.monotonic() - t0 >= wait_s:
                raise
            taken, info = False, None
        if taken:
            return Lease(meta, name, holder, ttl_s)
        waited = time.monotonic() - t0
        if waited >= wait_s and info is not None:
            raise LeaseHeld(name, info, waited)
        time.sleep(min(poll_s, max(wait_s - waited, 0.01)))


@contextmanager
def hold(
    meta: MetaStore,
    *,
    holder: str,
    flow: str,
    ttl_s: float,
    wait_s: float = 0.0,
    name: str = PIPELINE,
) -> Iterator[Lease]:
    """``with hold(...)``: the lease for the block, released however the block ends."""
    lease = acquire(meta, holder=holder, flow=flow, ttl_s=ttl_s, wait_s=wait_s, name=name)
    try:
        yield lease
    finally:
        lease.release()
