"""Control-plane state of staleness: source revisions, contest evidence, canaries (DuckDB v4).

``source_revisions`` holds the current revision of every corpus source ``memctl sources update``
was told about. An update older (by ``changed_at``) than the stored one is ignored, so files
replayed out of order converge on the latest revision. ``handled_at`` marks a deletion the
nightly run has already revoked through lineage, so it is revoked once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from memory_core.stores.meta import MetaStore
from memory_core.stores.status_writes import MetaStatuses, write_status

__all__ = [
    "CanaryRow",
    "SourceRevision",
    "canaries",
    "contest_seen",
    "list_sources",
    "mark_source_handled",
    "record_contests",
    "settle_contests",
    "upsert_canary",
    "upsert_sources",
]


@dataclass(frozen=True)
class SourceRevision:
    source_id: str
    revision: str
    changed_at: datetime
    deleted: bool = False
    updated_at: datetime | None = None
    handled_at: datetime | None = None
    receipt_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "source_id": self.source_id,
            "revision": self.revision,
            "changed_at": self.changed_at.isoformat(),
            "deleted": self.deleted,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "handled_at": self.handled_at.isoformat() if self.handled_at else None,
            "receipt_id": self.receipt_id,
        }


_COLUMNS = "source_id, revision, changed_at, deleted, updated_at, handled_at, receipt_id"


def upsert_sources(
    con: duckdb.DuckDBPyConnection, records: Sequence[SourceRevision], *, now: datetime
) -> tuple[list[str], list[str]]:
    """Store newer revisions inside the caller's transaction: (applied ids, ignored ids).

    A record is ignored when the stored one changed later, or is the same revision and state.
    """
    applied: list[str] = []
    ignored: list[str] = []
    for rec in records:
        row = con.execute(
            "SELECT revision, changed_at, deleted FROM source_revisions WHERE source_id = ?",
            [rec.source_id],
        ).fetchone()
        if row is not None and (
            row[1] > rec.changed_at or (row[0] == rec.revision and bool(row[2]) == rec.deleted)
        ):
            ignored.append(rec.source_id)
            continue
        con.execute(
            "INSERT INTO source_revisions VALUES (?, ?, ?, ?, ?, NULL, NULL) "
            "ON CONFLICT (source_id) DO UPDATE SET revision = excluded.revision, "
            "changed_at = excluded.changed_at, deleted = excluded.deleted, "
            "updated_at = excluded.updated_at, handled_at = NULL, receipt_id = NULL",
            [rec.source_id, rec.revision, rec.changed_at, rec.deleted, now],
        )
        applied.append(rec.source_id)
    return applied, ignored


def list_sources(meta: MetaStore) -> list[SourceRevision]:
    with meta.connect() as con:
        rows = con.execute(f"SELECT {_COLUMNS} FROM source_revisions ORDER BY source_id").fetchall()
    return [SourceRevision(*r) for r in rows]


def mark_source_handled(
    con: duckdb.DuckDBPyConnection, source_id: str, *, now: datetime, receipt_id: str
) -> None:
    con.execute(
        "UPDATE source_revisions SET handled_at = ?, receipt_id = ? WHERE source_id = ?",
        [now, receipt_id, source_id],
    )


def contest_seen(meta: MetaStore, record_ids: Iterable[str]) -> set[tuple[str, str]]:
    """(record, episode) pairs already recorded as contradicting evidence."""
    ids = sorted(set(record_ids))
    if not ids:
        return set()
    with meta.connect() as con:
        rows = con.execute(
            "SELECT record_id, episode_id FROM contest_evidence WHERE list_contains(?, record_id)",
            [ids],
        ).fetchall()
    return {(r[0], r[1]) for r in rows}


def record_contests(
    con: duckdb.DuckDBPyConnection,
    pairs: Iterable[tuple[str, str, str]],
    *,
    now: datetime,
) -> None:
    """(record_id, episode_id, tenant_id) contradicting evidence, in the caller's transaction."""
    for record_id, episode_id, tenant_id in pairs:
        con.execute(
            "INSERT INTO contest_evidence VALUES (?, ?, ?, ?, NULL, NULL) ON CONFLICT DO NOTHING",
            [record_id, episode_id, tenant_id, now],
        )


def settle_contests(
    con: duckdb.DuckDBPyConnection, record_id: str, *, now: datetime, settlement: str
) -> int:
    rows = con.execute(
        "UPDATE contest_evidence SET settled_at = ?, settlement = ? "
        "WHERE record_id = ? AND settled_at IS NULL RETURNING episode_id",
        [now, settlement, record_id],
    ).fetchall()
    return len(rows)


@dataclass(frozen=True)
class CanaryRow:
    procedure_id: str
    tenant_id: str
    namespace: str
    name: str
    version: str
    stable_id: str | None
    fraction: float
    started_at: datetime
    status: str
    decided_at: datetime | None = None
    detail: dict[str, Any] | None = None


def canaries(meta: MetaStore, *, status: str | None = None) -> list[CanaryRow]:
    where, params = ("WHERE status = ?", [status]) if status else ("", [])
    with meta.connect() as con:
        rows = con.execute(
            "SELECT procedure_id, tenant_id, namespace, name, version, stable_id, fraction, "
            f"started_at, status, decided_at, detail FROM canaries {where} ORDER BY procedure_id",
            params,
        ).fetchall()
    return [CanaryRow(*r[:10], json.loads(r[10]) if r[10] else None) for r in rows]


def upsert_canary(con: duckdb.DuckDBPyConnection, row: CanaryRow) -> None:
    """Register a canary (created ``running``) or record its outcome; the status of an
    existing one changes through the lifecycle writer."""
    at = row.decided_at or row.started_at
    write_status(None, MetaStatuses(con, {row.procedure_id: row.status}, table="canaries"), at=at)
    con.execute(
        "INSERT INTO canaries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (procedure_id) DO UPDATE SET "
        "decided_at = excluded.decided_at, detail = excluded.detail",
        [
            row.procedure_id, row.tenant_id, row.namespace, row.name, row.version,
            row.stable_id, row.fraction, row.started_at, row.status, row.decided_at,
            json.dumps(row.detail or {}, sort_keys=True, default=str),
        ],
    )  # fmt: skip
