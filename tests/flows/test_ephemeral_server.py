"""A SIGKILLed command's ephemeral Prefect server exits with it (issue 18: 12 orphans of
~220 MB after 12 kills). A real command process, a real server, a real SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.kit.prefect import seed_database

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys, time
    from flows.ephemeral import start_ephemeral_server
    server = start_ephemeral_server()
    print(server.server_process.pid, server.api_url, flush=True)
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by init) counts as gone
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
def test_ephemeral_server_exits_when_its_command_is_killed(tmp_path):
    seed_database(tmp_path / "prefect")  # its PREFECT_HOME: a migrated database (kit/prefect.py)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PYTHONPATH=str(ROOT),
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
    )
    command = subprocess.Popen(
        [sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True
    )
    server_pid = None
    try:
        line = command.stdout.readline()  # after the server is healthy
        assert line, "the command died before its server was up"
        server_pid = int(line.split()[0])
        assert _alive(server_pid)
        command.send_signal(signal.SIGKILL)  # no atexit hook runs
        command.wait()
        deadline = time.monotonic() + 60  # a bound on waiting, not a speed claim
        while _alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(server_pid), "the server outlived its command: an orphan"
    finally:
        command.kill()
        if server_pid is not None and _alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)


def test_no_server_is_started_when_an_api_url_is_set(monkeypatch):
    from flows.ephemeral import start_ephemeral_server

    # the session's test harness sets PREFECT_API_URL: the choice is Prefect's, not ours
    assert start_ephemeral_server() is None
