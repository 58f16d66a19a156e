"""Helpers for the MCP server's tests: a demo home, and the SDK's real client over stdio/HTTP.

The server always runs as its own process (``python -m memory_core.cli mcp ...``), as an
agent's MCP client would start it (forked from a server that imported the SDKs:
``forkserver.launcher``); the tests talk to it with ``ClientSession``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from memory_core.demo.generate import generate_demo
from memory_core.eval.harness import EvalHome
from tests.kit import duckdb_instances, forkserver

DEMO_TENANT = "acme-it"


def build_demo_home(root: Path, *, tenant: str = DEMO_TENANT) -> tuple[Path, datetime, dict]:
    """One tenant of the seeded demo after one night (ingest, consolidate, approve, maintain)
    with the hash embedder; returns (home, the night's clock, the demo's truth)."""
    data = generate_demo(seed=7)
    episodes = [e for e in data.episodes if e["tenant_id"] == tenant]
    last = max(datetime.fromisoformat(e["occurred_at"].replace("Z", "+00:00")) for e in episodes)
    now = last + timedelta(days=1)
    home = EvalHome.create(root, "demo", embedder="hash")
    home.night(episodes, now=now, source="demo")
    return home.home, now, data.truth


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_EMBED__MODEL"] = "hash"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def mcp_args(home: Path, *extra: str) -> list[str]:
    return ["-m", "memory_core.cli", "mcp", "--home", str(home), *extra]


@asynccontextmanager
async def stdio_session(home: Path, *extra: str) -> AsyncIterator[ClientSession]:
    duckdb_instances.suspend()  # the server process opens the home's files itself
    # its own process, forked from one that imported the SDKs (tests/kit/forkserver.py)
    command = forkserver.launcher([sys.executable, *mcp_args(home, *extra)], env=server_env())
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env())
    with Path(os.devnull).open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def result_json(result: Any) -> dict[str, Any]:
    """The tool's result as a dict (structured content, else the JSON text)."""
    assert not result.is_error, result.content[0].text
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


def error_text(result: Any) -> str:
    assert result.is_error, f"expected an error, got {result.content[0].text[:200]}"
    return result.content[0].text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_http_server(home: Path, config: Path, port: int) -> subprocess.Popen[bytes]:
    """``memctl mcp --http 127.0.0.1:PORT`` as a subprocess, returned once it accepts."""
    duckdb_instances.suspend()  # the server process opens the home's files itself
    env = {**server_env(), "MEMCTL_CONFIG": str(config)}
    proc = subprocess.Popen(  # forked from a preloaded server, as stdio_session's
        forkserver.launcher(
            [sys.executable, *mcp_args(home, "--http", f"127.0.0.1:{port}")], env=env
        ),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            msg = f"MCP HTTP server exited: {err[-2000:]}"
            raise RuntimeError(msg)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    msg = "MCP HTTP server did not start in 60 s"
    raise RuntimeError(msg)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@asynccontextmanager
async def http_session(port: int, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as client:
        url = f"http://127.0.0.1:{port}/mcp"
        async with (
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session
