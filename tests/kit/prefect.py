"""Real Prefect servers for tests whose flows run in subprocesses.

* ``session_harness``: the session's test harness server (tests/flows/conftest.py): what
  ``prefect_test_harness`` starts (Prefect's ephemeral API server, uvicorn on loopback, a
  fresh SQLite database, no scheduler), but one for the whole run: the first xdist worker to
  need it starts it and the others use it too (each harness server cost ~21 CPU s to start
  and ~1.5 CPU s a minute idle; three workers started three). It stops when the run's main
  pytest process ends. It runs without the task-run recorder, event persister and triggers
  (``EVENT_SERVICES_OFF``: no test of the harness reads what they write). Without xdist it
  is ``prefect_test_harness`` itself.
* ``harness_prefect``: that server, for subprocesses: a real API server on loopback, reached
  through ``PREFECT_API_URL`` like any server. Tests that only need flow runs recorded
  somewhere a subprocess can reach (the crash harnesses' killed runs) use it and start no
  second server.
* ``local_prefect``: one real ``prefect server start`` (with its services: the scheduler,
  late runs...) on a free loopback port, started per test process on first use (~15-25 CPU s
  here, plus ~1.5 CPU s a minute idle) and shared by every module that asks; it is stopped
  after the last test of the unit that uses it (``stop_local_prefect_after``, from
  tests/conftest.py) and always at exit (its process group is killed). For schedules and
  ``memctl serve``. Without the event services (``EVENT_SERVICES_OFF``); its scheduler,
  late-runs and cancellation services run as in any ``prefect server start``.
* ``seed_database``: a copy of the run's freshly migrated database (the harness server's, as
  it first became healthy) for any other server a test starts (``local_prefect``, a test's
  own ``prefect server start``, ``memctl serve``'s, an ephemeral one): Prefect's migrations
  then run once per run instead of once per server.
"""

from __future__ import annotations

import atexit
import fcntl
import inspect
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kit.once import session_root

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
# the run's migrated Prefect database (seed_database), next to the harness server's own
TEMPLATE_DB = "template.db"
_template: Path | None = None  # set once this process has found or started that server


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


# Runs the shared harness server (argv[2:]) until the process argv[1] (the run's main pytest
# process) is gone, or until SIGTERM; then stops it as Prefect's harness does (terminate,
# kill after a while). `python -S`: nothing but the standard library.
WATCHDOG = r"""
import os, signal, subprocess, sys, time
watched, cmd = int(sys.argv[1]), sys.argv[2:]
server = subprocess.Popen(cmd)
def stop(*_):
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while server.poll() is None:
    try:
        os.kill(watched, 0)
    except ProcessLookupError:
        stop()
    time.sleep(1)
sys.exit(server.returncode)
"""


# The event services a test's Prefect server does without. Its clients (in-process flows,
# crash children, flow-run processes) send every task-run state change as an event; the
# task-run recorder turns those into task_run rows, the event persister writes each event to
# SQLite, the triggers evaluate automations on them: ~26% of a core through a run for the
# harness server (py-spy, s32), for rows no test of these servers reads. What the tests read
# is written by the API directly (flow runs and their states, flow-run inputs, artifacts,
# deployments), and the services they assert on stay on: the scheduler, late runs,
# cancellation cleanup, pause expirations, the concurrency-slot repossessor and the event
# stream out (runners and futures may subscribe to it). Off for the harness server, for
# ``local_prefect``, and for the server the browser test's ``memctl serve`` starts (set in
# that test's environment); a test that asserts on task runs or events starts a server with
# every service (test_privacy_end_to_end).
EVENT_SERVICES_OFF = {
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false",
}


def _shared_harness_server(factory: pytest.TempPathFactory) -> str:
    """The run's harness server's API URL: started by the first worker that asks (under a
    lock in the run's temporary root, tests/kit/once.py), found healthy by the others."""
    from prefect.settings import get_current_settings

    global _template
    root = session_root(factory) / "harness-prefect"
    root.mkdir(parents=True, exist_ok=True)
    _template = root / TEMPLATE_DB
    found = root / "api_url"
    with (root / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if found.exists():
            api_url = found.read_text()
            if not _healthy(api_url):
                pytest.fail(f"the run's harness Prefect server at {api_url} is down")
            return api_url
        port = _free_port()
        api_url = f"http://127.0.0.1:{port}/api"
        env = {
            **os.environ,
            # what prefect_test_harness's server gets (SubprocessASGIServer): no UI, the
            # ephemeral server's settings, this process's Prefect settings, a fresh database
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
            **get_current_settings().to_environment_variables(exclude_unset=True),
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{root}/prefect.db",
            **EVENT_SERVICES_OFF,
        }
        import prefect

        server = [sys.executable, "-m", "uvicorn", "--app-dir",
                  str(prefect.__module_path__.parent), "--factory",
                  "prefect.server.api.server:create_app", "--host", "127.0.0.1",
                  "--port", str(port), "--log-level", "error", "--lifespan", "on"]  # fmt: skip
        # the main pytest process: an xdist worker's parent
        watched = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
        log = (root / "server.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-S", "-c", WATCHDOG, str(watched), *server],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives this worker; not signalled with its group
        )  # fmt: skip
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and proc.poll() is None:
            if _healthy(api_url):
                # before any test uses it: its database is migrated and holds no run yet
                _copy_sqlite(root / "prefect.db", root / TEMPLATE_DB)
                found.write_text(api_url)
                return api_url
            time.sleep(0.2)
        if proc.poll() is None:
            proc.terminate()
        tail = (root / "server.log").read_text(errors="replace")[-2000:]
        pytest.fail(f"the harness Prefect server did not become healthy:\n{tail}")
        raise AssertionError  # unreachable


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database a server has open (SQLite's backup API, not a
    file copy: the server may be writing its WAL)."""
    import sqlite3

    partial = target.with_name(target.name + ".partial")
    src, dst = sqlite3.connect(source), sqlite3.connect(partial)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    partial.rename(target)


def seed_database(prefect_home: Path) -> bool:
    """Give a Prefect server about to start in ``prefect_home`` (its default database,
    ``<PREFECT_HOME>/prefect.db``) a copy of the run's freshly migrated database, so it does
    not run Prefect's ~100 migrations itself (~6 of its ~13 CPU s to become healthy, s28).
    The copy is the harness server's database taken when it first became healthy: the schema
    at head and Prefect's registered block types, no flow run. What a test then reads from
    that server is what it wrote itself. False (nothing copied: the server migrates as
    usual) without xdist (the harness is then Prefect's own) or outside tests/flows."""
    target = prefect_home / "prefect.db"
    if _template is None or not _template.exists() or target.exists():
        return False
    prefect_home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template, target)
    return True


# Prefect joins a flow run's heartbeat thread when the run ends, and that thread sleeps in
# one-second steps: every flow run of the suite ended up to a second late. The product turns
# them off for its own ephemeral server (flows/ephemeral.py); the harness's server is one too.
NO_HEARTBEATS = {"flows.heartbeat_frequency": None}


@contextmanager
def session_harness(factory: pytest.TempPathFactory) -> Iterator[None]:
    """``prefect_test_harness`` for a whole run: under xdist one server for every worker."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        from prefect.settings import temporary_settings
        from prefect.testing.utilities import prefect_test_harness

        with (
            prefect_test_harness(server_startup_timeout=int(STARTUP_TIMEOUT_S)),
            temporary_settings(updates=NO_HEARTBEATS),
        ):
            yield
        return
    import prefect.context
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.utilities.asyncutils import run_coro_as_sync

    api_url = _shared_harness_server(factory)
    with ExitStack() as stack:
        stack.enter_context(temporary_settings(updates={PREFECT_API_URL: api_url, **NO_HEARTBEATS}))
        # as prefect_test_harness: the harness settings are the process-global ones too
        stack.enter_context(
            prefect.context._temporary_global_settings_context(
                prefect.context.get_settings_context()
            )
        )
        yield

        async def drain() -> None:  # as prefect_test_harness does before it stops
            try:
                result = APILogWorker.instance().drain()
                if inspect.isawaitable(result):
                    await result
            except RuntimeError:  # never started
                pass
            result = EventsWorker.drain_all()
            if inspect.isawaitable(result):
                await result

        run_coro_as_sync(drain())


def stop_local_prefect_after(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the local server once this process has run the last test of the unit that uses
    it (``schedule.LOCAL_PREFECT``; the schedule keeps that unit's tests together): it is
    asked for by no other test, and an idle ``prefect server start`` (its services loop)
    would otherwise burn CPU until the worker exits. A later caller starts a new one."""
    from tests.kit.schedule import LOCAL_PREFECT, group_of

    if _proc is None or group_of(item) != LOCAL_PREFECT or group_of(nextitem) == LOCAL_PREFECT:
        return
    global _server
    _stop()
    _server = None


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
    seed_database(home)
    server = LocalPrefect(api_url=f"http://127.0.0.1:{port}/api", home=home)
    log = (home / "server.log").open("wb")
    prefect = Path(sys.executable).with_name("prefect")
    # dies with this process: an xdist worker ends by os._exit, and then no atexit hook runs
    # (two servers of a whole-suite run were still up 10 minutes after it)
    from flows.ephemeral import popen_dies_with_parent

    _proc = popen_dies_with_parent(
        [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=server.env(**EVENT_SERVICES_OFF),
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
