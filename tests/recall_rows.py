"""Rows for read-path tests, written straight to Lance with the tables' schemas.

Facts and procedures are produced by promotion in the pipeline; the read path's tests must not
depend on it, so they make rows here: every column of schemas.py with a sensible default.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from memory_core.embed import Embedder
from memory_core.models import content_hash
from memory_core.stores.lance import LanceStore
from memory_core.stores.schemas import ID_COLUMN, schema_for

T0 = datetime(2026, 7, 1, tzinfo=UTC)

_SPECIFIC: dict[str, dict[str, Any]] = {
    "facts": {
        "predicate": "prefers",
        "object": "dark mode",
        "conditions": "{}",
        "supersedes": None,
        "superseded_by": None,
        "candidate_id": None,
        "approver": None,
        "sources": "[]",
    },
    "procedures": {
        "name": "fix-vpn-720",
        "version": "1",
        "steps": ["reset network adapter", "reconnect vpn"],
        "preconditions": "{}",
        "effect": None,
        "rollback": None,
        "approver": "reviewer@acme",
        "supersedes": None,
        "superseded_by": None,
        "candidate_id": None,
        "sources": "[]",
        "authority": "human_approved",
    },
    "digests": {
        "cluster_id": "c1",
        "episode_count": 4,
        "success_count": 3,
        "failure_count": 1,
        "first_at": T0,
        "last_at": T0,
    },
    "episodes": {
        "session_id": None,
        "occurred_at": T0,
        "source_role": "agent",
        "goal": None,
        "actions": [],
        "outcome": "success",
        "conditions": "{}",
        "observations": [],
        "feedback": None,
        "claims": "[]",
        "consent_basis": None,
        "sources": "[]",
        "procedure_id": None,
        "procedure_version": None,
        "redactions": 0,
    },
}


def make_row(table: str, embedder: Embedder, record_id: str, **overrides: Any) -> dict[str, Any]:
    """A complete row of ``table``; ``text`` is embedded unless ``vector`` is given."""
    row: dict[str, Any] = {
        ID_COLUMN[table]: record_id,
        "tenant_id": "acme",
        "subject_id": "u1",
        "namespace": "it",
        "status": "active",
        "valid_from": T0,
        "valid_to": None,
        "recorded_at": T0,
        "recorded_to": None,
        "expires_at": None,
        "sensitivity": "low",
        "purpose": None,
        "authority": "user_statement",
        "confidence": 0.9,
        "importance": 0.5,
        "provenance": "[]",
        "embedding_version": embedder.version,
        "policy_version": "1",
        "text": f"{table} {record_id}",
    }
    row.update(_SPECIFIC[table])
    row.update(overrides)
    for key in ("conditions", "preconditions"):
        if isinstance(row.get(key), dict):
            row[key] = json.dumps(row[key], sort_keys=True)
    row["content_hash"] = content_hash([table, record_id, row["text"]])
    if row.get("vector") is None:
        row["vector"] = embedder.embed([row["text"]])[0].tolist()
    return row


def write_rows(store: LanceStore, table: str, rows: list[dict[str, Any]]) -> None:
    """One upsert commit of ``rows`` (all of one table)."""
    dim = store.vector_dim(table) or 384
    store.upsert(table, pa.Table.from_pylist(rows, schema=schema_for(table, dim)))
