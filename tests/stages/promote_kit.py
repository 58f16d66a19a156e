"""Shared steps of the promotion tests: the real stages, from episodes to a decided batch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory_core.config import Settings, load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.models import CandidateStatus
from memory_core.stages.cluster import cluster_partition
from memory_core.stages.embed import embed_episodes
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stages.review import (
    DecisionResult,
    ReviewRequest,
    build_review_batches,
    decide_batch,
)
from memory_core.stages.score import score_candidates
from memory_core.stores import Stores, open_stores
from memory_core.stores.candidates import list_candidates
from memory_core.stores.review import list_batches


@dataclass
class Home:
    """A throwaway home for module-scoped fixtures (the ``mem`` fixture is per test)."""

    settings: Settings
    stores: Stores
    embedder: HashEmbedder = field(default_factory=lambda: HashEmbedder(384))

    def ingest(self, episodes: list[dict[str, Any]], now: datetime) -> None:
        """Ingest, then embed what came without a vector (the nightly's first task)."""
        ingest_records(
            self.stores, self.settings, RunContext(now=now), [json.dumps(e) for e in episodes],
            embedder=self.embedder,
        )  # fmt: skip
        embed_episodes(self.stores, self.settings, RunContext(now=now), embedder=self.embedder)

    def cluster(self, tenant: str, namespace: str, *, now: datetime) -> None:
        cluster_partition(
            self.stores, self.settings.cluster, RunContext(now=now), Partition(tenant, namespace)
        )


def open_home(path: Path) -> Home:
    settings = load_settings(home=path, embed={"model": "hash"})
    return Home(settings, open_stores(settings))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def user_says(
    eid: str, subject: str, predicate: str, obj: str, *, when: str, said: str | None = None,
    recorded: str | None = None, role: str = "user", tenant: str = "acme", namespace: str = "it",
) -> dict[str, Any]:  # fmt: skip
    """A chat episode in which ``role`` states ``predicate = obj`` (a claim, not yet a fact)."""
    text = said or f"The {predicate} is {obj}."
    ep: dict[str, Any] = {
        "episode_id": eid,
        "tenant_id": tenant,
        "subject_id": subject,
        "namespace": namespace,
        "occurred_at": when,
        "source_role": role,
        "outcome": "unknown",
        "text": text,
        "claims": [{"predicate": predicate, "object": obj, "span": text}],
    }
    if recorded:
        ep["recorded_at"] = recorded
    return ep


def consolidate(
    mem: Any, now: datetime, *, tenant: str = "acme", namespace: str = "it", cluster: bool = True
) -> None:
    """Cluster + mine + score (heuristic: no API key in tests), as the nightly run does.

    ``cluster=False`` skips clustering where only users' claims matter (they need no clusters).
    """
    ctx = RunContext(now=now)
    if cluster:
        mem.cluster(tenant, namespace, now=now)
    mine_partition(mem.stores, mem.settings, ctx, Partition(tenant, namespace))
    score_candidates(mem.stores, mem.settings.score, ctx, sync=True)


def review_all(
    mem: Any, now: datetime, *, reviewer: str = "alice", decision: str = "approve",
    reason: str = "", kind: str | None = None,
) -> list[DecisionResult]:  # fmt: skip
    """Build batches and decide every open one the same way."""
    build_review_batches(mem.stores, mem.settings, RunContext(now=now))
    out = []
    for batch in list_batches(mem.stores.meta, status="open"):
        if kind and batch.kind != kind:
            continue
        request = ReviewRequest(decision=decision, reviewer=reviewer, reason=reason)
        out.append(
            decide_batch(
                mem.stores, mem.settings, RunContext(now=now), batch.batch_id, request,
                embedder=mem.embedder,
            )
        )  # fmt: skip
    return out


def statuses(mem: Any) -> dict[str, CandidateStatus]:
    return {c.candidate_id: c.status for c in list_candidates(mem.stores.meta)}
