"""Real Prefect servers for tests whose flows run in subprocesses.

* ``harness_prefect``: the session harness's server (tests/flows/conftest.py,
  ``prefect_test_harness``). It is a real API server on loopback, a child of the test
  process, so a subprocess reaches it through ``PREFECT_API_URL`` like any server; it runs no
  scheduler. Tests that only need flow runs recorded somewhere a subprocess can reach (the
  crash harnesses' killed runs) use it and start no second server.
* ``local_prefect``: one real ``prefect server start`` (with its services: the scheduler,
  late runs...) on a free loopback port, started per test process on first use (~15-25 CPU s
  here, plus ~1.5 CPU s a minute idle) and shared by every module that asks; it is always
  stopped at exit (its process group is killed). For schedules and ``memctl serve``.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

STARTUP_TIMEOUT_S = 150.0


@dataclass(frozen=True)
class LocalPrefect:
    api_url: str
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a subprocess that talks to this server (and nothing else)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PREFECT_", "MEMCTL_", "ANTHROPIC_"))
        }
        env.update(
            PREFECT_API_URL=self.api_url,
            PREFECT_HOME=str(self.home),
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            DO_NOT_TRACK="1",
            PREFECT_LOGGING_LEVEL="WARNING",
            PREFECT_LOGGING_TO_API_ENABLED="false",
            # what memctl would set before importing Prefect (cli_support.prefect_env): a
            # process may then be forked from one that imported Prefect (kit/forkserver.py)
            PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="120",
            MEMCTL_EMBED__MODEL="hash",
        )
        env.update(extra)
        return env


_server: LocalPrefect | None = None
_proc: subprocess.Popen[bytes] | None = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _stop() -> None:
    global _proc
    if _proc is not None and _proc.poll() is None:
        os.killpg(_proc.pid, signal.SIGTERM)
        try:
            _proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(_proc.pid, signal.SIGKILL)
            _proc.wait(timeout=15)
    _proc = None


def harness_prefect(tmp_root: Path) -> LocalPrefect:
    """The running session harness's server, for subprocesses (``tmp_root``: their
    ``PREFECT_HOME``). Only inside the harness (a test under tests/flows)."""
    from prefect.settings import PREFECT_API_URL

    api_url = PREFECT_API_URL.value()
    if not api_url or not _healthy(api_url):
        pytest.fail(f"no running Prefect test harness server (PREFECT_API_URL={api_url!r})")
    home = tmp_root / "prefect-client"
    home.mkdir(parents=True, exist_ok=True)
    return LocalPrefect(api_url=api_url, home=home)


def local_prefect(tmp_root: Path) -> LocalPrefect:
    """The shared server, started on first call; skips the test if it cannot start."""
    global _server, _proc
    if _server is not None and _proc is not None and _proc.poll() is None:
        return _server
    port = _free_port()
    home = tmp_root / "prefect-server"
    home.mkdir(parents=True, exist_ok=True)
    server = LocalPrefect(api_url=f"http://127.0.0.1:{port}/api", home=home)
    log = (home / "server.log").open("wb")
    prefect = Path(sys.executable).with_name("prefect")
    # dies with this process: an xdist worker ends by os._exit, and then no atexit hook runs
    # (two servers of a whole-suite run were still up 10 minutes after it)
    from flows.ephemeral import popen_dies_with_parent

    _proc = popen_dies_with_parent(
        [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=server.env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    atexit.register(_stop)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if _proc.poll() is not None:
            break
        if _healthy(server.api_url):
            _server = server
            return server
        time.sleep(0.5)
    _stop()
    tail = (home / "server.log").read_text(errors="replace")[-2000:]
    pytest.fail(f"local prefect server did not become healthy:\n{tail}")
    raise AssertionError  # unreachable
