"""Real subprocesses for tests without paying Python's imports every time: a fork server.

A ``memctl`` or ``python -c`` subprocess spends 3-5 CPU seconds importing anthropic, prefect,
typer and lancedb's generated models before it does anything, and the suite starts hundreds.
``run`` takes the same arguments as ``subprocess.run`` and gives the same
``CompletedProcess``, but the process is forked from a server that imported those once:

* it is still a separate OS process (its own pid, file descriptors, exit status, signals;
  ``SIGKILL`` kills it and nothing else), started the way Python starts one: ``-m module``
  and ``-c code`` run through ``runpy``/``exec`` as ``__main__``, a console script (``memctl``)
  runs as a script, with the given argv, environment, working directory and stdio; at the end
  non-daemon threads are joined and ``atexit`` handlers run, then stdio is flushed;
* the server imports modules that start no thread, plus the storage stack (numpy, pyarrow,
  duckdb, lance, lancedb), whose import starts idle threads that each library takes down or
  rebuilds across a fork: OpenBLAS's workers and jemalloc's background thread through their
  ``pthread_atfork`` handlers, lancedb's event loop and tokio runtime in its own fork hook
  (``lancedb/background_loop.py``). The server never uses them, so no operation is in flight
  when it forks; before every fork it checks that no thread appeared since its imports (else
  the test falls back to a real subprocess). The project itself is imported by each child,
  fresh;
* modules may read the environment when imported, so there is one server per environment
  (all but ``MEMCTL_*``, ``ANTHROPIC_*`` and ``PYTEST_*``, which only our code, the SDK and
  pytest read, at run time, and Prefect's ``PREFECT_*`` unless Prefect is preloaded), started
  with it; Prefect is preloaded only on request (see ``PREFECT_PRELOAD``).

Anything else (``Popen``, a command line this does not recognise) is left to ``subprocess``.
``MEMCTL_TEST_FORKSERVER=0`` turns the server off: every call then is ``subprocess.run``.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

# imported once by every server (pure Python, or extension modules that start no thread and
# read no environment that a test varies): ~3 CPU s of the ~4-5 s a `memctl` spends importing
PRELOAD = (
    "anthropic",
    "anthropic.types",
    "typer",
    "typer.testing",
    "rich",
    "rich.console",
    "httpx",
    "pydantic",
    "pydantic_settings",
    "lance_namespace",
    "lance_namespace_urllib3_client.models",
    "yaml",
    "jsonschema",
    # the storage stack (~0.7 CPU s more per process): its import starts threads that survive a
    # fork as each library intends (module docstring); lancedb warns about its fork support in
    # every child, so the server ignores that warning (SERVER)
    "numpy",
    "pyarrow",
    "pyarrow.compute",
    "duckdb",
    "lance",
    "lancedb",
)
# Prefect's server app: imported by a command only when it starts an ephemeral server, i.e.
# when ``PREFECT_API_URL`` is unset (flows/ephemeral.py; Prefect's get_client). A server for
# an environment that sets it preloads only the part of it a flow run imports anyway
# (FastAPI's encoders, prefect/flows.py): ~3 CPU s and ~70 MB less per server to start (s32)
PREFECT_SERVER_APP = "prefect.server.api.server"
PREFECT_SERVER_APP_USED_BY_FLOWS = "fastapi.encoders"
# Prefect too, only when asked (``preload_prefect=True``): Prefect reads its settings and sets
# up its logging when imported, and memctl sets some of them first when they are unset
# (memory_core/cli_support.py `prefect_env`, `logging_setup.prefect_logging` for JSON logs).
# So Prefect is preloaded only for an environment that already sets all of them (memctl then
# changes nothing before importing Prefect) and never for JSON logs.
PREFECT_PRELOAD = (
    "prefect",
    "prefect.flows",
    "prefect.tasks",
    "prefect.client.orchestration",
    "prefect.cli",
    PREFECT_SERVER_APP,
)
PREFECT_ENV_SET_BY_MEMCTL = (
    "PREFECT_HOME",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
    "PREFECT_SERVER_ANALYTICS_ENABLED",
    "DO_NOT_TRACK",
    "PREFECT_LOGGING_LEVEL",
    "PREFECT_LOGGING_TO_API_ENABLED",
)
# read when a command runs, never by the preloaded modules at import (PYTEST_CURRENT_TEST
# names the running test): the rest of the environment is part of a server's identity
RUNTIME_ENV_PREFIXES = ("MEMCTL_", "ANTHROPIC_", "PYTEST_")
# and, for a server that does not preload Prefect, what only Prefect reads (at its import, in
# the child): tests that give each command its own PREFECT_HOME or PREFECT_API_URL (a server
# of their own) then share one fork server instead of starting one each (~5 CPU s apiece)
PREFECT_ENV_PREFIXES = ("PREFECT_",)
START_TIMEOUT_S = 120.0
MAX_SERVERS = 3  # per test process (each holds ~150-250 MB, mostly shared with its children)

# The server: accept a request (argv, env, cwd, three fds), fork, answer the child's pid,
# then its wait status when it ends. Runs as `python -c SERVER <socket path> <modules>`.
SERVER = r"""
import gc, importlib, json, os, select, signal, socket, sys, traceback, warnings
path, modules = sys.argv[1], [m for m in sys.argv[2].split(",") if m]
parent = os.getppid()
# lance warns before every fork and lancedb in every forked child (its runtime is rebuilt
# there): expected here, and not the command's output
warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
for name in modules:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
# what the children inherit is never garbage: out of their collections' way (and their pages
# not written by them), as Python's docs advise for a process that forks without exec
gc.collect()
gc.freeze()
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(64)
os.write(1, b"ready\n")
children = {}


def threads():
    return set(os.listdir("/proc/self/task"))


# the preloaded libraries' own (module docstring); OpenBLAS stops its workers at the first fork
preloaded_threads = threads()


def child(req, fds, conn):
    import atexit, io, runpy, threading, types
    signal.set_wakeup_fd(-1)  # the command's SIGCHLD is its own (the server's loop below)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.close(wake_r)
    os.close(wake_w)
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    conn.close()
    listener.close()
    for conn in list(children.values()):
        conn.close()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()
    os.environ.update(req["env"])
    if req["cwd"]:
        os.chdir(req["cwd"])
    enc = "utf-8"
    unbuffered = bool(req["env"].get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.open(0, "rb", closefd=False), encoding=enc)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.open(1, "wb", closefd=False), encoding=enc, write_through=unbuffered)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.open(2, "wb", closefd=False), encoding=enc, errors="backslashreplace",
        line_buffering=True)
    kind, what, args = req["kind"], req["what"], req["args"]
    code = 0
    try:
        if kind == "module":
            sys.argv = [what, *args]
            sys.path[0] = os.getcwd()
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        elif kind == "code":
            sys.argv = ["-c", *args]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            main.__builtins__ = __builtins__
            sys.modules["__main__"] = main
            exec(compile(what, "<string>", "exec"), vars(main))
        else:
            sys.argv = [what, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(what))
            runpy.run_path(what, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException as exc:  # as Python prints it: without this server's frame
        exc = exc.with_traceback(exc.__traceback__.tb_next)
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except BaseException:
        traceback.print_exc()
        code = code or 1
    os._exit(code & 0xFF)


# Sleep until a request or a child's end: SIGCHLD writes to wake_w (Python's wakeup fd), so
# a status goes back as soon as the child exits; the parent is checked once a second. (A
# 20 ms polling loop cost each idle server ~0.4 CPU s a minute, ~4 s over a suite run.)
wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
signal.signal(signal.SIGCHLD, lambda signum, frame: None)
while True:
    ready, _, _ = select.select([listener, wake_r], [], [], 1.0)
    if wake_r in ready:
        try:
            while os.read(wake_r, 4096):
                pass
        except BlockingIOError:
            pass
    if os.getppid() != parent:  # the test process died without stopping us: so do we
        os.killpg(0, signal.SIGKILL)
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(json.dumps({"status": status}).encode() + b"\n")
            except OSError:
                pass
            conn.close()
    if listener not in ready:
        continue
    conn, _ = listener.accept()
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        data += conn.recv(1 << 20)
    req = json.loads(data)
    if threads() - preloaded_threads:  # never fork with a thread we did not expect
        conn.sendall(b'{"refused": "threads"}\n')
        conn.close()
        for fd in fds:
            os.close(fd)
        continue
    pid = os.fork()
    if pid == 0:
        try:
            child(req, fds, conn)
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
"""


# For code that starts the process itself (the MCP SDK's stdio client): a bare Python (``-S``,
# standard library only, ~20 ms) that has a server fork the real command with the launcher's
# own stdin, stdout and stderr, forwards SIGTERM/SIGINT/SIGHUP to it and exits as it exits.
# Run as `python -S -c LAUNCHER <socket path> <request> <argv...>`; if the server is gone or
# refuses, it execs the real command line instead.
LAUNCHER = r"""
import json, os, signal, socket, sys
path, request, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    socket.send_fds(conn, [request.encode() + b"\n"], [0, 1, 2])
    replies = conn.makefile("rb")
    reply = json.loads(replies.readline())
except (OSError, ValueError):
    reply = {"refused": "no server"}
if "refused" in reply:
    os.execv(argv[0], argv)
pid = reply["pid"]
os.close(0)
os.close(1)  # the command's stdout ends when the command's ends


def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, forward)
status = json.loads(replies.readline())["status"]
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.WEXITSTATUS(status))
"""


class Refused(Exception):
    """The server would not fork (another thread appeared): run a real subprocess."""


class _Server:
    def __init__(self, env: Mapping[str, str], modules: Sequence[str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="forkserver-")
        self.path = os.path.join(self.dir, "s")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, self.path, ",".join(modules)],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_S)
        if not ready or self.proc.stdout.readline() != b"ready\n":
            self.stop()
            raise RuntimeError("the test fork server did not start")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Kill and reap the server, and remove its socket's directory (each server made one
        under the temp dir; left behind, a developer's /tmp gained a few per suite run)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def spawn(self, request: dict[str, Any], fds: Sequence[int]) -> tuple[_Lines, int]:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], list(fds))
        lines = _Lines(conn)
        reply = json.loads(lines.next(None))
        if "refused" in reply:
            conn.close()
            raise Refused(reply["refused"])
        return lines, int(reply["pid"])


class _Lines:
    """The server's reply lines on one connection. A child that exits at once has its pid and
    its status sent before the first is read, and one ``recv`` can return both: what follows
    the line asked for is kept for the next (parsing both as one line failed a suite run)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buf = conn, b""

    def next(self, deadline: float | None) -> bytes:
        while b"\n" not in self.buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.conn], [], [], wait)
            if not ready:
                raise TimeoutError
            chunk = self.conn.recv(4096)
            if not chunk:
                raise ConnectionError("the test fork server went away")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"


_servers: dict[tuple[Any, ...], _Server] = {}
_lock = threading.Lock()


def _server(
    env: Mapping[str, str], preload_prefect: bool, preload: Sequence[str] | None = None
) -> _Server:
    """The server for this environment, started if none is running (``preload``: other
    modules than ``PRELOAD``, for the kit's own tests of a server's life, which fork nothing
    that needs them and would otherwise pay ~3 CPU s a server for imports they never use)."""
    modules = PRELOAD if preload is None else tuple(preload)
    if preload_prefect:
        missing = [k for k in PREFECT_ENV_SET_BY_MEMCTL if k not in env]
        if missing or env.get("MEMCTL_LOG_FORMAT", "text") != "text":
            msg = f"preload_prefect needs {missing} set and text logs (PREFECT_PRELOAD)"
            raise ValueError(msg)
        prefect = PREFECT_PRELOAD
        if env.get("PREFECT_API_URL"):
            prefect = tuple(m for m in prefect if m != PREFECT_SERVER_APP)
            prefect += (PREFECT_SERVER_APP_USED_BY_FLOWS,)
        modules = PRELOAD + prefect
    runtime = RUNTIME_ENV_PREFIXES + (() if preload_prefect else PREFECT_ENV_PREFIXES)
    key = (modules, tuple(sorted((k, v) for k, v in env.items() if not k.startswith(runtime))))
    with _lock:
        server = _servers.pop(key, None)
        if server is not None and not server.alive():
            server.stop()  # reaped, its directory removed
            server = None
        if server is None:
            while len(_servers) >= MAX_SERVERS:  # stop the least recently used
                _servers.pop(next(iter(_servers))).stop()
            server = _Server(env, modules)
        _servers[key] = server  # most recently used last
        return server


@atexit.register
def stop_all() -> None:
    """Stop every server (and so reap the CPU time of its children for `time -v`)."""
    for server in _servers.values():
        server.stop()
    _servers.clear()


def _parse(args: Sequence[str]) -> tuple[str, str, list[str]] | None:
    """(kind, what, argv) for a command line Python would start the way we emulate."""
    args = [os.fspath(a) for a in args]
    if not args:
        return None
    exe, rest = args[0], args[1:]
    if os.path.abspath(exe) == os.path.abspath(sys.executable):
        if len(rest) >= 2 and rest[0] == "-m":
            return "module", rest[1], rest[2:]
        if len(rest) >= 2 and rest[0] == "-c":
            return "code", rest[1], rest[2:]
        return None
    script = Path(exe)
    if script.is_file() and script.parent == Path(sys.executable).parent:
        with script.open("rb") as fh:  # a console script of this venv (memctl)
            first = fh.readline()
        if first.startswith(b"#!") and b"python" in first:
            return "script", str(script), rest
    return None


def _request(
    parsed: tuple[str, str, list[str]], env: Mapping[str, str] | None, cwd: Any
) -> dict[str, Any]:
    """What the server is asked to fork: the parsed command, its environment (this process's
    when ``env`` is None) and working directory (this process's when ``cwd`` is None)."""
    kind, what, rest = parsed
    return {
        "kind": kind, "what": what, "args": rest,
        "env": dict(os.environ if env is None else env),
        "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
    }  # fmt: skip


def _child_fd(value: Any, default: int, stack: ExitStack) -> tuple[int, Any]:
    """(a new fd for the child, the file to read back or None) for a stdio argument."""
    if value is None:
        return os.dup(default), None
    if value == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR), None
    if value == subprocess.PIPE:
        tmp = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (it is closed)
        return os.dup(tmp.fileno()), tmp
    if isinstance(value, int):
        return os.dup(value), None
    return os.dup(value.fileno()), None


# read when this is first imported (conftest), before clean_environ drops every MEMCTL_
# variable from the tests' environment; a test may still switch it off with monkeypatch.setenv
_OFF_FOR_THE_RUN = os.environ.get("MEMCTL_TEST_FORKSERVER") == "0"


def enabled() -> bool:
    on = not _OFF_FOR_THE_RUN and os.environ.get("MEMCTL_TEST_FORKSERVER", "1") != "0"
    return on and hasattr(socket, "send_fds")


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input: str | bytes | None = None,
    capture_output: bool = False,
    stdin: Any = None,
    stdout: Any = None,
    stderr: Any = None,
    text: bool = False,
    timeout: float | None = None,
    check: bool = False,
    preload_prefect: bool = False,
    preload: Sequence[str] | None = None,
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` for a Python command line, forked from a preloaded server.

    ``preload_prefect``: the command imports Prefect anyway and ``env`` sets what memctl would
    set before importing it (``PREFECT_ENV_SET_BY_MEMCTL``): fork from a server that has.
    ``preload``: see ``_server`` (the kit's own tests)."""
    from tests.kit import duckdb_instances

    duckdb_instances.release()  # the child may open a DuckDB file this process kept open
    argv = [os.fspath(a) for a in args]
    parsed = _parse(argv) if enabled() else None
    real = {
        "env": env, "cwd": cwd, "input": input, "capture_output": capture_output,
        "stdin": stdin, "stdout": stdout, "stderr": stderr, "text": text, "timeout": timeout,
        "check": check,
    }  # fmt: skip
    if parsed is None:
        return subprocess.run(argv, **real)
    if capture_output:
        stdout = stderr = subprocess.PIPE
    request = _request(parsed, env, cwd)
    child_env = request["env"]
    with ExitStack() as stack:
        if input is not None:
            stdin = stack.enter_context(tempfile.TemporaryFile())
            stdin.write(input.encode() if isinstance(input, str) else input)
            stdin.seek(0)
        fds: list[int] = []
        try:
            in_fd, _ = _child_fd(stdin, 0, stack)
            fds.append(in_fd)
            out_fd, out_file = _child_fd(stdout, 1, stack)
            fds.append(out_fd)
            if stderr == subprocess.STDOUT:
                err_fd, err_file = os.dup(out_fd), None
            else:
                err_fd, err_file = _child_fd(stderr, 2, stack)
            fds.append(err_fd)
            lines, pid = _server(child_env, preload_prefect, preload).spawn(request, fds)
        except Refused:
            return subprocess.run(argv, **real)
        finally:
            for fd in fds:
                os.close(fd)
        deadline = None if timeout is None else time.monotonic() + timeout
        with lines.conn:
            try:
                reply = json.loads(lines.next(deadline))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                lines.next(None)
                raise subprocess.TimeoutExpired(argv, timeout or 0) from None
        status = int(reply["status"])
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        outputs: list[Any] = []
        for file in (out_file, err_file):
            data = None
            if file is not None:
                file.seek(0)
                data = file.read()
                data = data.decode() if text else data
            outputs.append(data)
    result = subprocess.CompletedProcess(argv, code, outputs[0], outputs[1])
    if check:
        result.check_returncode()
    return result


def launcher(
    args: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    preload_prefect: bool = False,
) -> list[str]:
    """A command line that runs ``args`` forked from a preloaded server, for code that starts
    the process itself: the launcher's stdio, signals and exit status are the command's. The
    command's environment and working directory are these (the launcher's own are unused);
    ``args`` itself when the server is off or the command line is not one it forks."""
    from tests.kit import duckdb_instances

    duckdb_instances.release()  # the command may open a DuckDB file this process kept open
    argv = [os.fspath(a) for a in args]
    parsed = _parse(argv) if enabled() else None
    if parsed is None:
        return argv
    request = _request(parsed, env, cwd)
    child_env = request["env"]
    server = _server(child_env, preload_prefect)
    return [sys.executable, "-S", "-c", LAUNCHER, server.path, json.dumps(request), *argv]


__all__ = ["PREFECT_PRELOAD", "PRELOAD", "enabled", "launcher", "run", "stop_all"]
