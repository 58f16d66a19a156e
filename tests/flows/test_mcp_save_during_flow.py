"""memory_save never waits for, blocks or is lost to the pipeline.

The server runs as its own process (stdio, the SDK's client). First, saves while this test
process holds the DuckDB file open read-write (which locks it against every other process,
as a running flow does): saves do not need it. Then saves while the real nightly flow runs
through Prefect. Every save succeeds and every saved episode is in the episodes table; the
episodes saved before the night end up in a candidate's evidence.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import anyio
import duckdb

from flows.nightly import run_nightly
from memory_core.stores import open_stores
from tests.conftest import episode, lines_of
from tests.kit.mcp import result_json, stdio_session

# no DuckDB instance kept open by the test process (tests/kit/duckdb_instances.py):
# the MCP server process opens the home while the test reads it
KEEP_DUCKDB_INSTANCES = False

NOW = datetime(2026, 8, 1, tzinfo=UTC)
TENANT = "acme"


def _vpn_save(i: int, subject: str) -> dict:
    return {
        "subject_id": subject,
        "goal": "VPN fails with error 720",
        "actions": ["reset network adapter", "reconnect vpn"],
        "outcome": "success",
        "conditions": {"error_code": "720", "adapter_mismatch": "true"},
        "text": f"Reset the adapter and the VPN came back (ticket {i}).",
        "namespace": "it",
        "occurred_at": f"2026-07-{10 + i % 18:02d}T10:00:00Z",
        "session_id": f"mcp-s{i}",
        "key": f"save-{i}",
    }


def test_saves_during_a_locked_control_plane_and_a_nightly_run(ingest, settings, stores):
    seed = [
        episode(episode_id=f"seed{i}", subject_id=s, occurred_at=f"2026-07-0{i + 1}T10:00:00Z")
        for i, s in enumerate(["ana", "ben"])
    ]
    ingest(lines_of(*seed))
    home = settings.home
    night: dict = {}

    def nightly() -> None:
        try:
            night["summary"] = run_nightly(settings, now=NOW)
        except BaseException as exc:  # raised again below, with its cause
            night["error"] = exc

    async def run() -> tuple[list[dict], list[dict], int]:
        before, during = [], []
        overlapped = 0
        async with stdio_session(home, "--tenant", TENANT) as s:
            # 1. the control plane held read-write by another process (this one)
            con = duckdb.connect(str(settings.meta_path))
            try:
                for i, subject in enumerate(["cho", "dev", "eli", "fay", "gus"]):
                    result = await s.call_tool("memory_save", _vpn_save(i, subject))
                    before.append(result_json(result))
            finally:
                con.close()
            # 2. the nightly flow, through Prefect, in a thread of this process
            thread = threading.Thread(target=nightly)
            thread.start()
            i = 100
            while thread.is_alive() or len(during) < 10:
                result = await s.call_tool("memory_save", _vpn_save(i, f"user{i % 7}"))
                during.append(result_json(result))
                overlapped += thread.is_alive()
                i += 1
            await anyio.to_thread.run_sync(thread.join)
        return before, during, overlapped

    before, during, overlapped = anyio.run(run)
    if "error" in night:  # the night's own failure, not a KeyError on its missing summary
        raise night["error"]
    assert night["summary"]["run_id"]
    assert overlapped > 0  # saves really ran while the flow did
    assert all(r["status"] == "inserted" for r in before + during)

    fresh = open_stores(settings)
    saved = {r["episode_id"] for r in before + during}
    stored = fresh.lance.scan("episodes", columns=["episode_id", "provenance"]).to_pylist()
    found = {r["episode_id"] for r in stored if '"source_kind":"mcp"' in (r["provenance"] or "")}
    assert saved <= found  # not one lost

    with fresh.meta.connect() as con:
        evidence = {
            row[0] for row in con.execute("SELECT episode_id FROM candidate_evidence").fetchall()
        }
    assert evidence & {r["episode_id"] for r in before}  # the night learnt from saved episodes
