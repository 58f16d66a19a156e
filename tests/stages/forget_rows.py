"""Facts, procedures and lineage written exactly as promotion writes them (for forgetting tests).

Promotion is a separate stage; these builders let forgetting be tested on its own: rows go in
through ``LanceStore.upsert`` with the real schema, lineage through ``lineage.add_edges``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from memory_core.embed import HashEmbedder
from memory_core.models import content_hash
from memory_core.stores import Stores
from memory_core.stores.lineage import Edge, add_edges

T = datetime(2026, 7, 1, 9, 0, tzinfo=UTC)
_EMBED = HashEmbedder(384)


def _common(tenant: str, subject: str | None, text: str, provenance: list[dict[str, Any]],
            authority: str, **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "tenant_id": tenant, "subject_id": subject, "namespace": "it", "status": "active",
        "valid_from": T, "valid_to": None, "recorded_at": T, "recorded_to": None,
        "expires_at": None, "sensitivity": "low", "purpose": None, "authority": authority,
        "confidence": 1.0, "importance": 0.5, "provenance": json.dumps(provenance),
        "content_hash": content_hash([text, provenance]), "embedding_version": "hash-384",
        "policy_version": "1", "text": text, "vector": _EMBED.embed([text])[0].tolist(),
        **extra,
    }  # fmt: skip


def prov(stores: Stores, ids: list[str], kind: str = "episode") -> list[dict[str, Any]]:
    """Provenance entries of stored episodes (with their subjects and content hashes)."""
    if kind != "episode":
        return [{"source_id": i, "source_kind": kind, "content_hash": None, "subject_id": None}
                for i in ids]  # fmt: skip
    quoted = ", ".join(f"'{i}'" for i in ids)
    rows = stores.lance.scan(
        "episodes",
        where=f"episode_id IN ({quoted})",
        columns=["episode_id", "subject_id", "content_hash"],
    ).to_pylist()
    return [{"source_id": r["episode_id"], "source_kind": "episode",
             "content_hash": r["content_hash"], "subject_id": r["subject_id"]} for r in rows]  # fmt: skip


def add_fact(stores: Stores, fact_id: str, *, sources: list[dict[str, Any]], subject: str | None,
             predicate: str = "editor", obj: str = "vim", tenant: str = "acme") -> None:  # fmt: skip
    text = f"{subject or tenant}: {predicate} = {obj}"
    row = _common(tenant, subject, text, sources,
                  "user_statement" if subject else "human_approved",
                  fact_id=fact_id, predicate=predicate, object=obj, conditions="{}",
                  supersedes=None, superseded_by=None, candidate_id=None, approver="rev",
                  sources="[]")  # fmt: skip
    _write(stores, "facts", row, fact_id, "fact", sources, tenant)


def add_procedure(stores: Stores, procedure_id: str, *, sources: list[dict[str, Any]],
                  tenant: str = "acme", name: str = "fix vpn 720") -> None:  # fmt: skip
    row = _common(tenant, None, f"{name}: reset adapter; reconnect", sources, "human_approved",
                  procedure_id=procedure_id, name=name, version="1.0.0",
                  steps=["reset adapter", "reconnect"], preconditions="{}", effect=None,
                  rollback=None, approver="rev", supersedes=None, superseded_by=None,
                  candidate_id=None, sources="[]")  # fmt: skip
    _write(stores, "procedures", row, procedure_id, "procedure", sources, tenant)


def _write(stores: Stores, table: str, row: dict[str, Any], rid: str, kind: str,
           sources: list[dict[str, Any]], tenant: str) -> None:  # fmt: skip
    schema = stores.lance.table(table).schema
    stores.lance.upsert(table, pa.Table.from_pylist([row], schema=schema))
    with stores.meta.transaction() as con:
        add_edges(con, [Edge(rid, kind, s["source_id"], s["source_kind"], s["content_hash"],
                             tenant, s["subject_id"]) for s in sources], now=T)  # fmt: skip


def status_of(stores: Stores, table: str, id_column: str, rid: str) -> str | None:
    rows = stores.lance.scan(table, where=f"{id_column} = '{rid}'", columns=["status"])
    return rows.column("status")[0].as_py() if rows.num_rows else None


def vectors(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)
