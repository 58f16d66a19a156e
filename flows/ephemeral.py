"""The ephemeral Prefect server a command starts dies with the command.

Without ``PREFECT_API_URL``, Prefect starts a temporary API server (``python -m uvicorn``, a
child process) the first time a client needs one, and stops it from an ``atexit`` hook. A
SIGKILLed ``memctl consolidate`` runs no hook: its server lived on as an orphan (~220 MB each;
12 of them after 12 kills). So a command that runs a flow starts that server first, from its
main thread, with a parent-death signal (Linux ``PR_SET_PDEATHSIG`` = SIGTERM, set by
``setpriv --pdeathsig`` or a ``preexec_fn``): the kernel sends the server SIGTERM when its
parent dies, however it dies.

Prefect's own command line is kept (its ``_run_uvicorn_command``); only ``Popen`` changes.
The instance is registered where Prefect looks for its ephemeral server
(``SubprocessASGIServer._instances[None]``), so every Prefect client of this process uses it.
Elsewhere (macOS, a server already chosen, ``PREFECT_API_URL`` set) nothing changes, and
Prefect's server app (FastAPI, ~2.5 CPU s and ~85 MB to import) is never imported: a command
talking to a configured Prefect API does not pay for a server it will not start.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from prefect.settings import PREFECT_API_URL

__all__ = [
    "die_with_parent",
    "no_heartbeats_to_an_ephemeral_server",
    "popen_dies_with_parent",
    "register_ephemeral_server",
    "start_ephemeral_server",
]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``sig`` when the thread that forked it ends (the
    main thread: when the process ends), and exits at once if its parent is already gone."""

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def popen_dies_with_parent(args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """``Popen`` whose child gets SIGTERM when this process (its forking thread: call it from
    the main thread) dies; ``memctl serve``'s own server uses it too.

    ``setpriv --pdeathsig`` (util-linux) sets the signal and execs the command: no Python
    code runs between fork and exec, so fork hooks (lancedb warns of deadlocks in forked
    children) are not involved. Without setpriv, a ``preexec_fn`` does the same."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return subprocess.Popen([setpriv, "--pdeathsig", "TERM", "--", *args], **kwargs)
    with warnings.catch_warnings():  # the child only calls prctl and exec
        warnings.filterwarnings("ignore", message=".*fork", category=RuntimeWarning)
        return subprocess.Popen(args, preexec_fn=die_with_parent(os.getpid()), **kwargs)


class _PopenDiesWithParent:
    """``subprocess`` as Prefect's server module sees it, with ``Popen`` tied to this process."""

    Popen = staticmethod(popen_dies_with_parent)

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)


@cache
def _tied_server_class() -> type[Any]:
    """Prefect's ephemeral server class, started with a parent-death signal when started from
    the main thread (the signal follows the thread that forks the child: a worker thread that
    ends would take the server with it, so from one the server starts as Prefect starts it).
    Built on first use: it needs Prefect's server app."""
    from prefect.server.api import server as prefect_server

    class _TiedServer(prefect_server.SubprocessASGIServer):  # type: ignore[misc]
        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            if threading.current_thread() is not threading.main_thread():
                return super()._run_uvicorn_command()
            real = prefect_server.subprocess
            prefect_server.subprocess = _PopenDiesWithParent()  # type: ignore[assignment]
            try:
                return super()._run_uvicorn_command()
            finally:
                prefect_server.subprocess = real

    return _TiedServer


def register_ephemeral_server() -> Any:
    """Make the server Prefect starts on demand in this process a tied one (not started yet);
    None when Prefect will use another API (``PREFECT_API_URL``) or off Linux."""
    if PREFECT_API_URL.value() or not sys.platform.startswith("linux"):
        return None
    tied = _tied_server_class()
    instances = tied._instances
    existing = instances.get(None)
    if existing is not None:
        return existing  # registered or started already: keep it
    server = object.__new__(tied)
    server.__init__(None)  # type: ignore[misc]
    instances[None] = server
    return server


def start_ephemeral_server() -> Any:
    """Start this process's ephemeral server now, from the main thread, tied to the process;
    None when Prefect will use another API, off Linux, or off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    server = register_ephemeral_server()
    if server is None or server.running:
        return server
    server.start()
    logger.debug("ephemeral Prefect server pid %s", server.server_process.pid)  # type: ignore[union-attr]
    return server


@contextmanager
def no_heartbeats_to_an_ephemeral_server() -> Iterator[None]:
    """Flow runs started inside send no heartbeats when their API is this process's ephemeral
    server and the heartbeat frequency is Prefect's default; else unchanged (a frequency the
    user chose, in the environment or a profile, is kept).

    Why: Prefect's heartbeat thread sleeps in one-second steps, and the engine joins it when
    a flow run ends, so every run ended up to a second after its last task (half a second on
    average; BENCHMARKS.md s44: the 1M 1% night's totals all ended near x.1 s). Heartbeats
    tell a server the run still lives, for automations that mark a silent run crashed; an
    ephemeral server lives and dies with this process, so nothing is there to be told (the
    run's own lease, ``memory_core/lease.py``, is what a later run checks). A configured API
    (``PREFECT_API_URL``) keeps Prefect's default."""
    from prefect.settings import get_current_settings, temporary_settings

    flows = get_current_settings().flows
    default = type(flows).model_fields["heartbeat_frequency"].default
    if PREFECT_API_URL.value() or flows.heartbeat_frequency != default:
        yield
        return
    with temporary_settings(updates={"flows.heartbeat_frequency": None}):
        yield
