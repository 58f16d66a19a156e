"""tests/kit/forkserver.py gives what ``subprocess.run`` gives for the command lines it forks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kit import forkserver

CODE = (
    "import os, sys\n"
    "print('argv', sys.argv[1:], os.getcwd(), os.environ.get('PYTEST_KIT_PROBE'))\n"
    "print('in', sys.stdin.read())\n"
    "print('ünïcode on stderr', file=sys.stderr)\n"
    "import atexit\n"
    "atexit.register(lambda: print('atexit ran'))\n"
    "sys.exit(int(sys.argv[1]))\n"
)


def _both(args: list[str], **kwargs: object) -> tuple[object, object]:
    real = subprocess.run(args, **kwargs)  # type: ignore[call-overload]
    forked = forkserver.run(args, **kwargs)  # type: ignore[arg-type]
    return real, forked


def test_a_forked_command_line_is_the_real_one(tmp_path: Path) -> None:
    env = {**os.environ, "PYTEST_KIT_PROBE": "seen"}
    real, forked = _both(
        [sys.executable, "-c", CODE, "3", "x y"],
        env=env, cwd=tmp_path, input="stdin text", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert isinstance(real, subprocess.CompletedProcess)
    assert isinstance(forked, subprocess.CompletedProcess)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode, real.stdout, real.stderr,
    )  # fmt: skip
    assert real.returncode == 3 and "atexit ran" in real.stdout


def test_module_errors_signals_and_timeouts(tmp_path: Path) -> None:
    real, forked = _both(
        [sys.executable, "-m", "json.tool", str(tmp_path / "missing.json")],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert isinstance(real, subprocess.CompletedProcess)
    assert isinstance(forked, subprocess.CompletedProcess)
    assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout) and real.returncode
    raised = forkserver.run([sys.executable, "-c", "raise ValueError('boom')"], capture_output=True)
    assert raised.returncode == 1
    assert raised.stderr.decode().splitlines()[1:] == [
        '  File "<string>", line 1, in <module>',
        "ValueError: boom",
    ]  # fmt: skip: the traceback a fresh interpreter prints, nothing of the server's
    killed = forkserver.run(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    )
    assert killed.returncode == -9
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)


def test_prefect_is_preloaded_only_for_an_environment_memctl_would_not_change() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    with pytest.raises(ValueError, match="PREFECT_HOME"):
        forkserver.run([sys.executable, "-c", "pass"], env=env, preload_prefect=True)


def test_a_launched_command_is_forked_and_gives_what_the_real_one_gives(tmp_path: Path) -> None:
    env = {**os.environ, "PYTEST_KIT_PROBE": "seen"}
    args = [sys.executable, "-c", CODE, "3", "x y"]
    real = subprocess.run(args, env=env, cwd=tmp_path, input="stdin text", capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    launched = forkserver.launcher(args, env=env, cwd=tmp_path)
    assert launched[:3] == [sys.executable, "-S", "-c"]  # the launcher, not the command
    forked = subprocess.run(launched, input="stdin text", capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode, real.stdout, real.stderr,
    )  # fmt: skip
    parent = [sys.executable, "-c", "import os; print(os.getppid())"]
    ppid = subprocess.run(forkserver.launcher(parent), capture_output=True, text=True, timeout=120)
    assert int(ppid.stdout) != os.getpid()  # a child of the server, not of the launcher's caller
    sleeper = subprocess.Popen(
        forkserver.launcher([sys.executable, "-c", "import time; print(1, flush=True); time.sleep(60)"]),
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert sleeper.stdout is not None and sleeper.stdout.readline() == b"1\n"
    sleeper.terminate()  # forwarded: the command dies of it, and the launcher as it did
    assert sleeper.wait(timeout=30) == -15


def test_a_stopped_or_dead_server_leaves_no_directory() -> None:
    # its own server (not another test's: it is killed), which preloads nothing
    env = {**os.environ, "KIT_PROBE": "dir-check"}
    server = forkserver._server(env, False, preload=())
    first = Path(server.dir)
    assert (first / "s").is_socket()
    server.proc.kill()  # died under the kit: the next request replaces it
    server.proc.wait(timeout=30)
    replaced = forkserver._server(env, False, preload=())
    assert replaced is not server and replaced.alive()
    assert not first.exists()
    second = Path(replaced.dir)
    servers = set(forkserver._servers.values())
    done = forkserver.run([sys.executable, "-c", "pass"], env=env, preload=())
    assert done.returncode == 0
    assert set(forkserver._servers.values()) == servers  # the replacement served it
    replaced.stop()
    assert not second.exists()
    # out of the kit's cache too: a stopped entry would hold one of its MAX_SERVERS slots and
    # push a live server of a later test in this process out first
    for key in [k for k, v in forkserver._servers.items() if v is replaced]:
        del forkserver._servers[key]


def test_reply_lines_that_arrive_in_one_read_are_read_one_by_one() -> None:
    """A child that exits at once has its pid and status sent together (a flaky suite run)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b'{"pid": 7}\n{"status": 0}\n')
        lines = forkserver._Lines(ours)
        assert json.loads(lines.next(None)) == {"pid": 7}
        assert json.loads(lines.next(time.monotonic() + 5)) == {"status": 0}
        theirs.sendall(b'{"st')  # a line split over two reads is put together
        theirs.sendall(b'atus": 9}\n')
        assert json.loads(lines.next(time.monotonic() + 5)) == {"status": 9}
