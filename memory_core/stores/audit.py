"""Audit log and receipts: who did what, when, with counts; never the content itself.

Ids are where the action is: an audit event's id is the stable id of what it records (when, who,
what, on what, with which counts and detail), so two runs of one input at one clock log the
same events and a rerun that redoes an action at the same clock does not log it twice; a
receipt's id is given by its stage from the action's inputs (``receipt_id``).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import duckdb

from memory_core.models import stable_id

__all__ = ["receipt_id", "record_audit", "store_receipt"]


def receipt_id(kind: str, *inputs: Any) -> str:
    """The id of the receipt for one action: ``kind`` and what identifies the action (a
    request id; a source and the clock; the pass's clock), never a random or wall-clock part."""
    return stable_id("rcpt", kind, *inputs)


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
    counts_json = json.dumps(counts or {}, sort_keys=True)
    detail_json = json.dumps(detail or {}, sort_keys=True, default=str)
    event_id = stable_id(
        "evt", at.isoformat(), actor, action, target, tenant_id, counts_json, detail_json
    )
    con.execute(
        "INSERT INTO audit_log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [
            event_id,
            at,
            run_id,
            actor,
            action,
            target,
            tenant_id,
            counts_json,
            detail_json,
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
