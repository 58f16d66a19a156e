"""The nightly flow under the home's lease: a second run is refused, a dead holder's is not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flows.nightly import run_nightly
from memory_core.lease import LeaseHeld, current_holder
from tests.conftest import episode, lines_of

NOW = datetime(2026, 8, 1, tzinfo=UTC)


def _plant(stores, *, host: str, pid: int) -> None:
    now = datetime.now(UTC)
    with stores.meta.transaction() as con:
        con.execute(
            "INSERT INTO leases VALUES ('pipeline', 'run_other', ?, ?, 'nightly-consolidation',"
            " ?, ?, ?)",
            [pid, host, now, now, now + timedelta(hours=1)],
        )


def test_a_second_consolidation_is_refused_naming_the_running_one(ingest, stores, settings):
    ingest(lines_of(episode()))
    _plant(stores, host="worker-7", pid=4242)
    with pytest.raises(LeaseHeld, match=r"run run_other .*pid 4242 on worker-7"):
        run_nightly(settings, now=NOW)
    with stores.meta.connect() as con:  # refused before writing anything
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM clusters").fetchone()[0] == 0
    assert current_holder(stores.meta).holder == "run_other"


def test_a_lease_left_by_a_dead_process_here_is_taken_over(ingest, stores, settings):
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    ingest(lines_of(episode()))
    _plant(stores, host=socket.gethostname(), pid=int(dead.stdout))
    summary = run_nightly(settings, now=NOW)
    assert summary["partitions"] == 1
    assert current_holder(stores.meta) is None  # released at the end of the run


def test_the_cli_prints_only_the_lease_message(ingest, stores, settings, capfd, monkeypatch):
    """`memctl consolidate` while another run holds the lease: the one-line reason, and not
    Prefect's 20-line traceback of the failed flow run in front of it."""
    import logging
    import sys

    from memory_core.cli import main
    from memory_core.logging_setup import _RUN_LOGGERS

    ingest(lines_of(episode()))
    _plant(stores, host="worker-7", pid=4242)
    for name in _RUN_LOGGERS:  # what the CLI adds stays out of the other tests' loggers
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    capfd.readouterr()
    argv = ["memctl", "consolidate", "--home", str(settings.home), "--now", "2026-08-01T00:00:00Z"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 1
    err = capfd.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: another run holds the 'pipeline' lease of this home")
    assert "run run_other" in lines[0] and "pid 4242 on worker-7" in lines[0]
