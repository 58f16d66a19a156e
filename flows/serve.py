"""``memctl serve``: every deployment of flows/deployments.py, served from this one process.

Prefect's ephemeral server never runs its scheduler, so schedules would never fire on it.
When ``PREFECT_API_URL`` is unset this starts a local server (``prefect server start --host
127.0.0.1 --port P``, its database under ``<home>/prefect``) as a child process, waits until it
is healthy and stops it on exit; with ``start_server=False`` it refuses and says exactly what
to start. An already healthy server on that port (a previous ``memctl serve``, one you
started yourself) is used as it is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from flows.ephemeral import popen_dies_with_parent
from memory_core.config import Settings
from memory_core.errors import ConfigError

__all__ = ["LocalServer", "ensure_api", "serve_deployments"]

HEALTH_TIMEOUT_S = 180.0

Say = Callable[[str], None]
_KEY = "prefect server"
_API_KEY = "PREFECT_API_URL"


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


class LocalServer:
    """A ``prefect server start`` child process on loopback."""

    def __init__(self, settings: Settings, port: int) -> None:
        self.port = port
        self.api_url = f"http://127.0.0.1:{port}/api"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = (settings.home / "prefect" / "server.log").resolve()

    def start(self, say: Say) -> None:
        if _healthy(self.api_url):
            say(f"using the Prefect server already running at {self.api_url}")
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        prefect = Path(sys.executable).with_name("prefect")
        cmd = [str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(self.port)]
        say(f"PREFECT_API_URL is unset: starting `prefect {' '.join(cmd[1:])}` ({self.log_path})")
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        # the UI asks the API at 127.0.0.1:4200 unless told otherwise: point it at this port
        env["PREFECT_UI_API_URL"] = self.api_url
        # it exits with memctl, even a SIGKILLed one (no orphan server): flows/ephemeral.py
        self.proc = popen_dies_with_parent(
            cmd, env=env, stdout=self.log_path.open("ab"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                msg = f"exited with status {self.proc.returncode}; see {self.log_path}"
                raise ConfigError(_KEY, msg)
            if _healthy(self.api_url):
                say(f"Prefect server healthy at {self.api_url} (UI: http://127.0.0.1:{self.port})")
                return
            time.sleep(0.5)
        self.stop()
        msg = f"not healthy after {HEALTH_TIMEOUT_S:.0f} s; see {self.log_path}"
        raise ConfigError(_KEY, msg)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        self.proc = None


def ensure_api(
    settings: Settings, *, port: int, start_server: bool, say: Say
) -> LocalServer | None:
    """Make sure PREFECT_API_URL points at a real server; returns the server we started."""
    if os.environ.get("PREFECT_API_URL"):
        say(f"serving against PREFECT_API_URL={os.environ['PREFECT_API_URL']}")
        return None
    if not start_server:
        msg = (
            "PREFECT_API_URL is unset and the ephemeral server never fires schedules: start a "
            f"server with `prefect server start --host 127.0.0.1 --port {port}` and set "
            f"PREFECT_API_URL=http://127.0.0.1:{port}/api (or drop --no-start-server)"
        )
        raise ConfigError(_API_KEY, msg)
    server = LocalServer(settings, port)
    server.start(say)
    os.environ["PREFECT_API_URL"] = server.api_url
    return server


def serve_deployments(
    settings: Settings,
    *,
    names: list[str] | None,
    interval_s: float | None,
    port: int,
    start_server: bool,
    config: Path | None,
    say: Say,
) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM); stops a server it started."""
    server = ensure_api(settings, port=port, start_server=start_server, say=say)

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        from prefect import serve
        from prefect.settings import PREFECT_API_URL, temporary_settings

        from flows.deployments import build_deployments

        deployments = build_deployments(
            settings,
            names=names,
            interval_s=interval_s,
            home=str(settings.home.resolve()),
            config=str(config.resolve()) if config else None,
        )
        say(
            f"serving {', '.join(d.name for d in deployments)} "
            f"({f'every {interval_s:g} s' if interval_s else 'crons'} in {settings.timezone})"
        )
        # Prefect read its settings when it was imported, before ensure_api set the variable:
        # without this the runner would talk to an ephemeral server of its own (on the same
        # database) while its flow runs talk to ours, and every concurrency-limited run was
        # cancelled ("Deployment concurrency slot lost during provisioning").
        with temporary_settings(updates={PREFECT_API_URL: os.environ["PREFECT_API_URL"]}):
            serve(*deployments, print_starting_message=False)
    except KeyboardInterrupt:
        say("stopped")
    finally:
        if server is not None:
            server.stop()
