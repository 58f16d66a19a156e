"""The home's pipeline lease: one run at a time, bounded waits, killed holders taken over."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from memory_core.lease import LeaseHeld, acquire, current_holder, hold
from memory_core.stores import Stores
from tests.kit import forkserver


def _plant(stores: Stores, *, holder: str, pid: int, host: str, expires_in_s: float) -> None:
    """A lease row as another process would have left it."""
    now = datetime.now(UTC)
    with stores.meta.transaction() as con:
        con.execute(
            "INSERT INTO leases VALUES ('pipeline', ?, ?, ?, 'nightly-consolidation', ?, ?, ?)",
            [holder, pid, host, now, now, now + timedelta(seconds=expires_in_s)],
        )


def test_second_start_fails_naming_the_holder_and_release_frees_it(stores: Stores) -> None:
    first = acquire(stores.meta, holder="run_a", flow="nightly-consolidation", ttl_s=60)
    with pytest.raises(LeaseHeld) as err:
        acquire(stores.meta, holder="run_b", flow="nightly-consolidation", ttl_s=60)
    text = str(err.value)
    assert "run run_a" in text and f"pid {os.getpid()}" in text
    assert socket.gethostname() in text and "nightly-consolidation" in text
    first.release()
    assert current_holder(stores.meta) is None
    acquire(stores.meta, holder="run_b", flow="nightly-consolidation", ttl_s=60).release()


def test_second_start_waits_bounded_then_gives_up(stores: Stores) -> None:
    with hold(stores.meta, holder="run_a", flow="f", ttl_s=60):
        t0 = time.monotonic()
        with pytest.raises(LeaseHeld, match="after waiting"):
            acquire(stores.meta, holder="run_b", flow="f", ttl_s=60, wait_s=1.0)
        assert 1.0 <= time.monotonic() - t0 < 10


def test_a_waiting_start_gets_the_lease_when_the_holder_ends(stores: Stores) -> None:
    import threading

    first = acquire(stores.meta, holder="run_a", flow="f", ttl_s=60)
    threading.Timer(0.5, first.release).start()
    second = acquire(stores.meta, holder="run_b", flow="f", ttl_s=60, wait_s=20)
    assert current_holder(stores.meta).holder == "run_b"
    second.release()


def test_the_lease_is_released_when_the_block_raises(stores: Stores) -> None:
    with pytest.raises(RuntimeError), hold(stores.meta, holder="run_a", flow="f", ttl_s=60):
        raise RuntimeError
    assert current_holder(stores.meta) is None


def test_a_running_holder_renews_so_it_never_expires(stores: Stores) -> None:
    # ttl 2 s (renewed every 0.5 s): a renewal opens the DuckDB file, and on a loaded machine
    # (load ~15-20) that lagged past a ttl of 0.4 s and then of 1 s
    lease = acquire(stores.meta, holder="run_a", flow="f", ttl_s=2.0)
    first_expiry = current_holder(stores.meta).expires_at
    time.sleep(6.0)  # three ttls: without renewal the lease would have lapsed
    info = current_holder(stores.meta)
    assert info.holder == "run_a" and info.expires_at > first_expiry
    with pytest.raises(LeaseHeld):
        acquire(stores.meta, holder="run_b", flow="f", ttl_s=2.0)
    lease.release()


def test_an_expired_lease_of_a_live_holder_elsewhere_is_taken_over(stores: Stores) -> None:
    _plant(stores, holder="run_old", pid=1, host="another-host", expires_in_s=-1)
    lease = acquire(stores.meta, holder="run_new", flow="f", ttl_s=60)
    assert current_holder(stores.meta).holder == "run_new"
    lease.release()


def test_an_unexpired_lease_on_another_host_blocks(stores: Stores) -> None:
    _plant(stores, holder="run_other", pid=1, host="another-host", expires_in_s=60)
    with pytest.raises(LeaseHeld, match="run_other"):
        acquire(stores.meta, holder="run_new", flow="f", ttl_s=60)


def test_a_holder_killed_with_sigkill_is_taken_over_at_once(stores: Stores, settings) -> None:
    """A real process takes the lease (ttl 1 hour) and is SIGKILLed: no release, no expiry."""
    code = (
        "import os, signal, sys\n"
        "from memory_core.config import load_settings\n"
        "from memory_core.lease import acquire\n"
        "from memory_core.stores import open_stores\n"
        "s = load_settings(home=sys.argv[1])\n"
        "acquire(open_stores(s).meta, holder='run_killed', flow='f', ttl_s=3600)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = forkserver.run(
        [sys.executable, "-c", code, str(settings.home)], capture_output=True, timeout=120
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    left = current_holder(stores.meta)
    assert left is not None and left.holder == "run_killed"
    assert left.expires_at > datetime.now(UTC) + timedelta(minutes=50)
    lease = acquire(stores.meta, holder="run_next", flow="f", ttl_s=60)
    assert current_holder(stores.meta).holder == "run_next"
    lease.release()


def test_a_holder_whose_lease_was_taken_over_learns_it_lost(stores: Stores) -> None:
    old = acquire(stores.meta, holder="run_a", flow="f", ttl_s=60)
    old._stop.set()  # a frozen holder: stops renewing
    with stores.meta.transaction() as con:
        con.execute("UPDATE leases SET expires_at = now() - INTERVAL 1 SECOND")
    new = acquire(stores.meta, holder="run_b", flow="f", ttl_s=60)
    assert old.renew() is False and old.lost
    old.release()  # releasing a lost lease leaves the new holder's row alone
    assert current_holder(stores.meta).holder == "run_b"
    new.release()


def test_status_shows_a_run_whose_lease_holder_is_gone_as_crashed(stores: Stores) -> None:
    """A SIGKILLed nightly run stays `running` in the runs table; status must not say so."""
    from memory_core.status import collect_status
    from memory_core.stores.ledger import start_run

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    at = datetime.now(UTC)
    for run_id in ("run_killed", "run_alive", "run_no_lease"):
        start_run(stores.meta, run_id=run_id, flow="nightly-consolidation", started_at=at,
                  clock=at, params={})  # fmt: skip
    here = socket.gethostname()

    def statuses() -> dict[str, str]:
        return {r["run_id"]: r["status"] for r in collect_status(stores)["last_runs"]}

    _plant(stores, holder="run_killed", pid=int(dead.stdout), host=here, expires_in_s=60)
    assert statuses() == {
        "run_killed": "crashed",
        "run_alive": "crashed",
        "run_no_lease": "crashed",
    }
    with stores.meta.transaction() as con:
        con.execute("DELETE FROM leases")
    _plant(stores, holder="run_alive", pid=os.getpid(), host=here, expires_in_s=60)
    assert statuses() == {
        "run_killed": "crashed",
        "run_alive": "running",
        "run_no_lease": "crashed",
    }
    with stores.meta.transaction() as con:  # a live pid, but the lease ran out: not renewing
        con.execute("UPDATE leases SET expires_at = ?", [at - timedelta(seconds=1)])
    assert statuses()["run_alive"] == "crashed"
