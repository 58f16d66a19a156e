"""The forgetting and deletion-requests flows, run for real on the shared Prefect harness."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from flows.forgetting import run_deletion_requests, run_forgetting_flow
from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.forget import request_deletion
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)


def _record(eid: str, subject: str, occurred: str) -> str:
    return json.dumps({
        "episode_id": eid, "tenant_id": "acme", "subject_id": subject, "namespace": "it",
        "occurred_at": occurred, "source_role": "agent", "goal": "VPN fails", "text": eid,
    })  # fmt: skip


def test_forgetting_and_deletion_flows(tmp_path):
    settings = load_settings(home=tmp_path / "home", embed={"model": "hash"})
    stores = open_stores(settings)
    ingest_records(
        stores, settings, RunContext(now=NOW),
        [_record("old", "u1", "2026-06-28T00:00:00Z"), _record("new", "u2", "2026-07-30T00:00:00Z"),
         _record("zed1", "zed", "2026-07-30T00:00:00Z")],
        embedder=HashEmbedder(384),
    )  # fmt: skip
    receipt = run_forgetting_flow(settings, now=NOW)
    assert receipt["expired"] == {"episodes": 1}
    request_id = request_deletion(stores, RunContext(now=NOW), kind="subject", target="zed")
    receipts = run_deletion_requests(settings, now=NOW)
    assert [r["request_id"] for r in receipts] == [request_id]
    assert receipts[0]["verification"]["verified"]
    assert run_deletion_requests(settings, now=NOW) == []
    assert stores.lance.count("episodes", "subject_id = 'zed'") == 0
