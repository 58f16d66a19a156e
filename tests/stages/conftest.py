"""Fixtures for the consolidation stages: real LanceDB + DuckDB in a temporary home.

The fixture is called ``mem`` (not ``stores``/``settings``) so it never shadows the root
conftest's fixtures that other suites under ``tests/stages`` rely on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from memory_core.config import Settings, load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.cluster import ClusterResult, cluster_partition
from memory_core.stages.embed import embed_episodes
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import MiningResult, mine_partition
from memory_core.stores import Stores, open_stores

T0 = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
SNAPSHOT_TABLES = ("clusters", "cluster_members", "candidates", "candidate_evidence", "audit_log")


def make_episode(eid: str, *, minutes: int = 0, **fields: Any) -> dict[str, Any]:
    """An agent episode about VPN error 720, overridable field by field."""
    base: dict[str, Any] = {
        "episode_id": eid,
        "tenant_id": "acme",
        "subject_id": "u1",
        "namespace": "it",
        "session_id": f"s-{eid}",
        "occurred_at": (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z"),
        "source_role": "agent",
        "goal": "VPN fails with error 720",
        "actions": ["reset network adapter", "reconnect vpn"],
        "outcome": "success",
        "conditions": {"error_code": "720", "adapter_mismatch": "true"},
        "text": "Reset the network adapter and reconnected the VPN for the user.",
    }
    base.update(fields)
    return base


def seed_scenario(tenant: str = "acme", prefix: str = "") -> list[dict[str, Any]]:
    """Reset adapter fixes 720 when adapter_mismatch=true (4 successes, 3 users, noise keys);
    fails when the root cause is an expired certificate (3 failures), where renewing works."""
    noise = [
        {"os": "windows-11", "region": "eu-west"},
        {"os": "macos-14", "region": "eu-west"},
        {"os": "windows-10", "region": "us-east"},
        {"os": "windows-11", "region": "us-east"},
    ]
    fix = {"error_code": "720", "adapter_mismatch": "true", "cert_expired": "false"}
    cert = {"error_code": "720", "adapter_mismatch": "false", "cert_expired": "true"}
    eps = []
    for i, (who, extra) in enumerate(zip(["ana", "ben", "cy", "ana"], noise, strict=True)):
        eps.append(
            make_episode(
                f"{prefix}ok{i}", minutes=i * 10, tenant_id=tenant, subject_id=who,
                conditions={**fix, **extra},
            )
        )  # fmt: skip
    for i, who in enumerate(["ben", "cy", "dee"]):
        eps.append(
            make_episode(
                f"{prefix}bad{i}", minutes=100 + i * 10, tenant_id=tenant, subject_id=who,
                outcome="failure", conditions={**cert, **noise[i]},
                text="Reset the network adapter and reconnected the VPN; still error 720.",
            )
        )  # fmt: skip
    for i, who in enumerate(["ben", "dee", "ana"]):
        eps.append(
            make_episode(
                f"{prefix}cert{i}", minutes=200 + i * 10, tenant_id=tenant, subject_id=who,
                actions=["renew certificate", "reconnect vpn"], conditions={**cert, **noise[i]},
                text="Renewed the machine certificate and reconnected the VPN for the user.",
            )
        )  # fmt: skip
    return eps


def statement(
    eid: str, subject: str, predicate: str, obj: str, *, minutes: int = 0, role: str = "user",
    span: str | None = None, tenant: str = "acme",
) -> dict[str, Any]:  # fmt: skip
    """A chat episode in which someone states a preference."""
    said = span or f"I prefer {obj}."
    return make_episode(
        eid, minutes=minutes, tenant_id=tenant, subject_id=subject, source_role=role,
        goal=None, actions=[], outcome="unknown", conditions={}, text=said,
        claims=[{"predicate": predicate, "object": obj, "span": said}],
    )  # fmt: skip


@dataclass
class Mem:
    """A throwaway home with both stores, and shortcuts for the stage calls."""

    settings: Settings
    stores: Stores
    embedder: HashEmbedder = field(default_factory=lambda: HashEmbedder(384))

    def ingest(self, episodes: list[dict[str, Any]], now: datetime = NOW) -> None:
        """Ingest, then embed what came without a vector (the nightly's first task)."""
        ingest_records(
            self.stores,
            self.settings,
            RunContext(now=now),
            [json.dumps(e) for e in episodes],
            embedder=self.embedder,
        )
        embed_episodes(self.stores, self.settings, RunContext(now=now), embedder=self.embedder)

    def cluster(
        self, tenant: str = "acme", namespace: str = "it", *, recluster: bool = False,
        now: datetime = NOW,
    ) -> ClusterResult:  # fmt: skip
        return cluster_partition(
            self.stores, self.settings.cluster, RunContext(now=now),
            Partition(tenant, namespace), recluster=recluster, steps=self.settings.steps,
        )  # fmt: skip

    def mine(
        self, tenant: str = "acme", namespace: str = "it", now: datetime = NOW
    ) -> MiningResult:
        return mine_partition(
            self.stores, self.settings, RunContext(now=now), Partition(tenant, namespace)
        )

    def consolidate(self, tenant: str = "acme", namespace: str = "it", now: datetime = NOW) -> None:
        self.cluster(tenant, namespace, now=now)
        self.mine(tenant, namespace, now=now)

    def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Full contents of the consolidation tables, in a stable order."""
        out = {}
        with self.stores.meta.connect() as con:
            for table in SNAPSHOT_TABLES:
                out[table] = sorted(con.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
        return out


def open_mem(home: Path, **overrides: Any) -> Mem:
    settings = load_settings(home=home, embed={"model": "hash"}, **overrides)
    return Mem(settings, open_stores(settings))


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Mem]:
    yield open_mem(tmp_path / "home")


@pytest.fixture
def kit() -> SimpleNamespace:
    """The builders above, for test modules (conftest modules are not importable by name)."""
    return SimpleNamespace(
        T0=T0,
        NOW=NOW,
        make_episode=make_episode,
        seed_scenario=seed_scenario,
        statement=statement,
        open_mem=open_mem,
    )
