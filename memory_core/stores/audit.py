"""Audit log and receipts: who did what, when, with counts; never the content itself."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import duckdb

__all__ = ["record_audit", "store_receipt"]


def record_audit(
    con: duckdb.DuckDBPyConnection,
    *,
    at: datetime,
    action: str,
    run_id: str | None = None,
    actor: str | None = None,
    target: str | None = None,
    tenant_id: str | None = None,
    counts: dict[str, Any] | None = None,
    detail: dict[str, Any] | None = None,
) -> str:
    event_id = f"evt_{uuid.uuid4().hex[:20]}"
    con.execute(
        "INSERT INTO audit_log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            event_id,
            at,
            run_id,
            actor,
            action,
            target,
            tenant_id,
            json.dumps(counts or {}, sort_keys=True),
            json.dumps(detail or {}, sort_keys=True, default=str),
        ],
    )
    return event_id


def store_receipt(
    con: duckdb.DuckDBPyConnection,
    *,
    receipt_id: str,
    kind: str,
    at: datetime,
    run_id: str | None,
    body: dict[str, Any],
    replace: bool = False,
) -> None:
    """Store a receipt once; ``replace`` rewrites its body (a later check changed it)."""
    on_conflict = "DO UPDATE SET body = excluded.body" if replace else "DO NOTHING"
    con.execute(
        f"INSERT INTO receipts VALUES (?, ?, ?, ?, ?) ON CONFLICT (receipt_id) {on_conflict}",
        [receipt_id, kind, at, run_id, json.dumps(body, sort_keys=True, default=str)],
    )
