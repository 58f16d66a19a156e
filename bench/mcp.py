"""Recall through MCP (stdio and Streamable HTTP) next to the in-process Recaller; save latency
idle and while a nightly run writes.

    python bench/mcp.py --rows 100000              # ~5-8 minutes on 2 shared cores

Home: bench/recall.py's synthetic ``facts`` (384-d hash-embedder-sized unit vectors,
``rows / 10,000`` tenants, 1,000 tenant-scope rows and 90 subjects of 100 rows each, 10%
superseded/expired/closed), compacted, with the full-text index. Two ``memctl mcp`` servers
run as their own processes, bound to tenant ``t0``: one over stdio, one over Streamable HTTP on
loopback with a bearer token. Every query is a random subject of ``t0`` and a random
"<word> error <code>" text, run the three ways in shuffled order (the same Recaller settings:
k=10, semantic, access log on); times are client-side wall clock of the whole call (for MCP:
JSON-RPC request, argument validation, the recall, the result as JSON and back).

Saves: ``memory_save`` over stdio, idle; then the demo's episodes are ingested and
``memctl consolidate`` (the nightly flow through Prefect, its own process, ephemeral server)
runs while saves continue until it exits: their latency, errors, and whether every saved
episode is in the table afterwards. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import numpy as np

os.environ.setdefault("LANCE_LOG", "error")
os.environ["MEMCTL_EMBED__MODEL"] = "hash"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# this file is named mcp.py: its own directory must not shadow the mcp package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from memory_core.config import load_settings  # noqa: E402
from memory_core.context import RunContext  # noqa: E402
from memory_core.demo.generate import generate_demo  # noqa: E402
from memory_core.embed import HashEmbedder  # noqa: E402
from memory_core.mcp_server.auth import hash_token  # noqa: E402
from memory_core.read.indexes import ensure_fts  # noqa: E402
from memory_core.recall import Recaller  # noqa: E402
from memory_core.stages.ingest import ingest_records  # noqa: E402
from memory_core.stores import open_stores  # noqa: E402
from memory_core.stores.lance import LanceStore  # noqa: E402


def _bench_recall() -> Any:
    """bench/recall.py (its synthetic facts and constants), loaded by path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_recall", HERE / "recall.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_recall = _bench_recall()
NOW, PER_TENANT, WORDS, build = _recall.NOW, _recall.PER_TENANT, _recall.WORDS, _recall.build
TOKEN = "bench-token-" + "x" * 24
TENANT = "t0"


def summary(ms: list[float]) -> dict[str, float]:
    arr = np.array(ms)
    return {
        "n": len(ms),
        "p50_ms": round(float(np.percentile(arr, 50)), 2),
        "p95_ms": round(float(np.percentile(arr, 95)), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def server_env(config: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env.update(MEMCTL_EMBED__MODEL="hash", PYTHONPATH=str(ROOT))
    if config is not None:
        env["MEMCTL_CONFIG"] = str(config)
    return env


def start_http(home: Path, config: Path, port: int) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "memory_core.cli", "mcp", "--home", str(home),
           "--now", NOW.isoformat(), "--http", f"127.0.0.1:{port}"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=server_env(config), stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            httpx2.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            return proc
        except httpx2.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("HTTP server did not start")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def recall_bench(home: Path, port: int, queries: int, warmup: int, seed: int) -> dict:
    settings = load_settings(home=home)
    memory = Recaller.from_settings(settings, embedder=HashEmbedder(384))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory_core.cli", "mcp", "--home", str(home), "--tenant", TENANT,
              "--now", NOW.isoformat()],
        env=server_env(),
    )  # fmt: skip
    rng = random.Random(seed)
    times: dict[str, list[float]] = {"in_process": [], "mcp_stdio": [], "mcp_http": []}
    counts: dict[str, list[int]] = {k: [] for k in times}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with Path(os.devnull).open("w") as devnull:
        async with (
            stdio_client(params, errlog=devnull) as (r1, w1),
            ClientSession(r1, w1) as stdio,
            httpx2.AsyncClient(headers=headers, timeout=60) as http_client,
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http_client) as (
                r2,
                w2,
            ),
            ClientSession(r2, w2) as http,
        ):
            await stdio.initialize()
            await http.initialize()
            for i in range(warmup + queries):
                subject = f"{TENANT}-u{rng.randrange(90)}"
                text = f"{rng.choice(WORDS)} error {rng.randrange(700, 800)}"
                args = {"query": text, "subject_id": subject, "type": "semantic", "k": 10}

                async def local(text: str = text, subject: str = subject) -> int:
                    out = memory.recall(
                        text, tenant_id=TENANT, subject_id=subject, memory_type="semantic",
                        k=10, now=NOW,
                    )  # fmt: skip
                    return len(out.records)

                async def remote(session: ClientSession, args: dict = args) -> int:
                    result = await session.call_tool("memory_recall", args)
                    if result.is_error:
                        raise RuntimeError(result.content[0].text)
                    return int(result.structured_content["count"])

                calls = [
                    ("in_process", local),
                    ("mcp_stdio", lambda s=stdio: remote(s)),
                    ("mcp_http", lambda s=http: remote(s)),
                ]
                rng.shuffle(calls)
                for name, fn in calls:
                    t0 = time.perf_counter()
                    n = await fn()
                    dt = (time.perf_counter() - t0) * 1000
                    if i >= warmup:
                        times[name].append(dt)
                        counts[name].append(n)
    memory.close()
    out: dict[str, Any] = {k: summary(v) for k, v in times.items()}
    base = out["in_process"]["p95_ms"]
    for name in ("mcp_stdio", "mcp_http"):
        out[name]["target_p95_ms"] = round(1.5 * base + 5, 2)
        out[name]["meets_target"] = out[name]["p95_ms"] <= 1.5 * base + 5
        out[name]["p95_over_in_process_ms"] = round(out[name]["p95_ms"] - base, 2)
    out["same_result_counts"] = counts["in_process"] == counts["mcp_stdio"] == counts["mcp_http"]
    return out


def _save_args(i: int) -> dict[str, Any]:
    return {
        "subject_id": f"saver{i % 13}",
        "goal": "VPN fails with error 720",
        "actions": ["reset network adapter", "reconnect vpn"],
        "outcome": "success" if i % 4 else "failure",
        "conditions": {"error_code": "720", "adapter_mismatch": "true" if i % 4 else "false"},
        "text": f"Agent report {i}: reset the adapter, the VPN came back.",
        "namespace": "it-support",
        "occurred_at": "2026-07-30T10:00:00Z",
        "key": f"bench-save-{i}",
    }


async def save_bench(home: Path, idle_saves: int, now: datetime) -> dict:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory_core.cli", "mcp", "--home", str(home), "--tenant", "acme-it"],
        env=server_env(),
    )
    idle: list[float] = []
    during: list[float] = []
    errors: list[str] = []
    ids: list[str] = []
    flow: dict[str, Any] = {}
    with Path(os.devnull).open("w") as devnull:
        async with (
            stdio_client(params, errlog=devnull) as (r, w),
            ClientSession(r, w) as session,
        ):
            await session.initialize()

            async def save(i: int, into: list[float]) -> None:
                t0 = time.perf_counter()
                result = await session.call_tool("memory_save", _save_args(i))
                into.append((time.perf_counter() - t0) * 1000)
                if result.is_error:
                    errors.append(result.content[0].text)
                else:
                    ids.extend(result.structured_content["episode_ids"])

            for i in range(idle_saves):
                await save(i, idle)
            env = {**server_env(), "PREFECT_HOME": str(home / "prefect"),
                   "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
                   "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                   "PREFECT_LOGGING_LEVEL": "WARNING"}  # fmt: skip
            cmd = [sys.executable, "-m", "memory_core.cli", "consolidate", "--home", str(home),
                   "--now", now.isoformat(), "--format", "json"]  # fmt: skip
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            i = idle_saves
            while proc.poll() is None:
                await save(i, during)
                i += 1
            flow["seconds"] = round(time.perf_counter() - t0, 1)
            flow["exit"] = proc.returncode
            flow["stderr_tail"] = proc.stderr.read().decode()[-300:] if proc.returncode else ""
    stored = LanceStore(str(home / "lance")).scan("episodes", columns=["episode_id"])
    have = set(stored.column("episode_id").to_pylist())
    return {
        "idle": summary(idle),
        "during_nightly": summary(during) if during else None,
        "nightly": flow,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "saved_episodes": len(ids),
        "missing_after_run": len(set(ids) - have),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--idle-saves", type=int, default=100)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = (args.rows // PER_TENANT) * PER_TENANT or PER_TENANT
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-mcp-"))
    home = work / "home"
    out: dict[str, Any] = {"rows": rows, "load_before": os.getloadavg()}

    # recall: the read path's synthetic facts, compacted, full-text indexed
    out["build_s"] = round(build(str(home / "lance"), rows, min(100, rows // 2000), args.seed), 2)
    table = LanceStore(str(home / "lance")).table("facts")
    table.optimize()
    ensure_fts(table)
    config = work / "memctl.toml"
    config.write_text(
        f'[[mcp.tokens]]\nname = "bench"\nsha256 = "{hash_token(TOKEN)}"\ntenant = "{TENANT}"\n'
    )
    port = free_port()
    server = start_http(home, config, port)
    try:
        out["recall"] = anyio.run(recall_bench, home, port, args.queries, args.warmup, args.seed)
    finally:
        server.terminate()
        server.wait(30)
    out["load_after_recall"] = os.getloadavg()

    # saves: idle, then while the nightly flow consolidates the demo's episodes
    settings = load_settings(home=home)
    stores = open_stores(settings)
    data = generate_demo(seed=7)
    lines = [json.dumps(e) for e in data.episodes]
    last = max(e["occurred_at"] for e in data.episodes)
    now = datetime.fromisoformat(last.replace("Z", "+00:00")).astimezone(UTC)
    ingest_records(stores, settings, RunContext(now=now), lines, embedder=HashEmbedder(384))
    out["nightly_input_episodes"] = len(lines)
    out["save"] = anyio.run(save_bench, home, args.idle_saves, now)
    out["load_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
