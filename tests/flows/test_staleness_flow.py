"""The nightly flow runs the staleness stage: a newer source revision makes facts stale."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from flows.nightly import run_nightly
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.recall import Recaller
from memory_core.stages.ingest import ingest_records
from memory_core.stages.review import ReviewRequest, decide_batch
from memory_core.stages.staleness.source_file import update_sources
from memory_core.stores import open_stores
from memory_core.stores.facts import list_rows
from memory_core.stores.review import list_batches

NOW = datetime(2026, 8, 1, tzinfo=UTC)
NEXT = datetime(2026, 8, 2, tzinfo=UTC)


def _said(eid: str, day: int) -> str:
    text = "The VPN server is vpn1.acme.example."
    return json.dumps(
        {
            "episode_id": eid, "tenant_id": "acme", "subject_id": "u1", "namespace": "it",
            "occurred_at": f"2026-07-{day:02d}T10:00:00Z", "source_role": "user", "text": text,
            "claims": [{"predicate": "vpn_server", "object": "vpn1.acme.example", "span": text}],
            "sources": [{"source_id": "kb/vpn", "revision": "r1"}],
        }
    )  # fmt: skip


def test_nightly_marks_facts_bound_to_an_old_revision_stale(settings):
    stores = open_stores(settings)
    embedder = HashEmbedder(settings.embed.dim)
    ingest_records(
        stores, settings, RunContext(now=NOW), [_said("s1", 1), _said("s2", 2)], embedder=embedder
    )
    first = run_nightly(settings, now=NOW)
    assert first["staleness"]["revisions"]["stale"] == []
    (batch,) = list_batches(stores.meta, status="open")
    request = ReviewRequest(decision="approve", reviewer="alice")
    decide_batch(stores, settings, RunContext(now=NOW), batch.batch_id, request, embedder=embedder)
    (fact,) = list_rows(stores.lance, "facts")
    line = json.dumps({"source_id": "kb/vpn", "revision": "r2", "changed_at": NOW.isoformat()})
    update_sources(stores, RunContext(now=NEXT), [line])
    reader = Recaller.from_settings(settings, embedder=embedder, access_log=False)
    ask = {"tenant_id": "acme", "subject_id": "u1", "memory_type": "semantic", "now": NEXT}
    assert [r["record_id"] for r in reader.recall("vpn server", **ask).records] == [fact["fact_id"]]
    second = run_nightly(settings, now=NEXT)
    assert second["staleness"]["revisions"]["stale"] == [fact["fact_id"]]
    assert reader.recall("vpn server", **ask).records == []
    kinds = {b.kind for b in list_batches(stores.meta, status="open")}
    assert kinds == {"revalidate"}
    reader.close()
