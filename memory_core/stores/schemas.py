"""Explicit Arrow schemas of the Lance tables agents read.

Nested values (conditions, claims, provenance, sources) are stored as canonical JSON strings:
Lance filters and DuckDB both read them, and schema evolution of a JSON column costs nothing.
Every table shares the columns of DESIGN.md section 3 (scope, status, the time fields,
sensitivity, purpose, authority, confidence, provenance, versions).

Bitemporal rows: valid time is [valid_from, valid_to); transaction time is
[recorded_at, recorded_to). A correction never edits meaning in place: the old row's
recorded_to is closed and a new row version is inserted, so "what did we believe at T about
time V" stays answerable. Current knowledge is ``recorded_to IS NULL``.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "FILTER_COLUMNS",
    "ID_COLUMN",
    "TABLES",
    "common_fields",
    "schema_for",
]

TS = pa.timestamp("us", tz="UTC")

ID_COLUMN = {
    "episodes": "episode_id",
    "facts": "fact_id",
    "procedures": "procedure_id",
    "digests": "digest_id",
}
TABLES = tuple(ID_COLUMN)

# Scalar-indexed columns: low-cardinality ones get bitmaps, the rest B-trees.
FILTER_COLUMNS: dict[str, str] = {
    "tenant_id": "bitmap",
    "subject_id": "btree",
    "namespace": "bitmap",
    "status": "bitmap",
}


def common_fields() -> list[pa.Field]:
    return [
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("subject_id", pa.string()),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),
        pa.field("valid_from", TS),
        pa.field("valid_to", TS),
        pa.field("recorded_at", TS, nullable=False),
        pa.field("recorded_to", TS),  # transaction time end: null = what we believe now
        pa.field("expires_at", TS),
        pa.field("sensitivity", pa.string(), nullable=False),
        pa.field("purpose", pa.string()),
        pa.field("authority", pa.string(), nullable=False),
        pa.field("confidence", pa.float32()),
        pa.field("importance", pa.float32()),
        pa.field("provenance", pa.string()),  # JSON [{source_id, source_kind, content_hash,...}]
        pa.field("content_hash", pa.string(), nullable=False),
        pa.field("embedding_version", pa.string()),
        pa.field("policy_version", pa.string()),
        pa.field("text", pa.string()),
    ]


def _episode_fields() -> list[pa.Field]:
    return [
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("session_id", pa.string()),
        pa.field("occurred_at", TS, nullable=False),
        pa.field("source_role", pa.string(), nullable=False),
        pa.field("goal", pa.string()),
        pa.field("actions", pa.list_(pa.string())),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("conditions", pa.string()),  # JSON {k: v}
        pa.field("observations", pa.list_(pa.string())),
        pa.field("feedback", pa.string()),
        pa.field("claims", pa.string()),  # JSON [{predicate, object, span, authority}]
        pa.field("consent_basis", pa.string()),
        pa.field("sources", pa.string()),  # JSON [{source_id, revision}]
        pa.field("procedure_id", pa.string()),
        pa.field("procedure_version", pa.string()),
        pa.field("redactions", pa.int32()),
    ]


def _fact_fields() -> list[pa.Field]:
    return [
        pa.field("fact_id", pa.string(), nullable=False),
        pa.field("predicate", pa.string(), nullable=False),
        pa.field("object", pa.string(), nullable=False),
        pa.field("conditions", pa.string()),
        pa.field("supersedes", pa.string()),
        pa.field("superseded_by", pa.string()),
        pa.field("candidate_id", pa.string()),
        pa.field("approver", pa.string()),
        pa.field("sources", pa.string()),
    ]


def _procedure_fields() -> list[pa.Field]:
    return [
        pa.field("procedure_id", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("version", pa.string(), nullable=False),
        pa.field("steps", pa.list_(pa.string())),
        pa.field("preconditions", pa.string()),
        pa.field("effect", pa.string()),
        pa.field("rollback", pa.string()),
        pa.field("approver", pa.string()),
        pa.field("supersedes", pa.string()),
        pa.field("superseded_by", pa.string()),
        pa.field("candidate_id", pa.string()),
        pa.field("sources", pa.string()),
    ]


def _digest_fields() -> list[pa.Field]:
    return [
        pa.field("digest_id", pa.string(), nullable=False),
        pa.field("cluster_id", pa.string()),
        pa.field("episode_count", pa.int32()),
        pa.field("success_count", pa.int32()),
        pa.field("failure_count", pa.int32()),
        pa.field("first_at", TS),
        pa.field("last_at", TS),
    ]


_SPECIFIC = {
    "episodes": _episode_fields,
    "facts": _fact_fields,
    "procedures": _procedure_fields,
    "digests": _digest_fields,
}


def schema_for(table: str, dim: int) -> pa.Schema:
    """The table's schema with a ``dim``-wide float32 vector column last."""
    fields = _SPECIFIC[table]() + common_fields()
    fields.append(pa.field("vector", pa.list_(pa.float32(), dim)))
    return pa.schema(fields)
