"""What a reviewer sees of a revalidate, settle or failures batch (``memctl review show``).

Per record: its text and status, and the evidence that demoted it -- the source revisions it is
bound to against the current ones (revalidate), the statements that contradict it (settle),
or the reported outcomes behind the rollback (failures).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from memory_core.stores import Stores
from memory_core.stores.facts import rows_by_ids
from memory_core.stores.review import BatchRow, get_items
from memory_core.stores.sources import list_sources

__all__ = ["record_batch_summary", "record_summary_markdown"]

_ACTIONS = {
    "revalidate": ("still true: active again, re-bound to the current revisions", "revoke it"),
    "settle": ("keep the fact", "overturn it: revoke it"),
    "failures": ("confirm the rollback", "dispute it (recorded)"),
}


def _row(stores: Stores, record_id: str) -> dict[str, Any] | None:
    for table in ("facts", "procedures"):
        rows = [
            r for r in rows_by_ids(stores.lance, table, [record_id]) if r["recorded_to"] is None
        ]
        if rows:
            return {k: v for k, v in rows[0].items() if k != "vector"} | {"table": table}
    return None


def _evidence(stores: Stores, kind: str, record_id: str, row: Mapping[str, Any]) -> Any:
    with stores.meta.connect() as con:
        if kind == "settle":
            rows = con.execute(
                "SELECT episode_id, settlement FROM contest_evidence WHERE record_id = ? "
                "ORDER BY episode_id",
                [record_id],
            ).fetchall()
            return [{"episode_id": e, "settlement": s} for e, s in rows]
        if kind == "failures":
            found = con.execute(
                "SELECT body FROM receipts WHERE kind = 'procedure_rollback' AND "
                "json_extract_string(body, '$.deprecated_row') = ?",
                [record_id],
            ).fetchone()
            return json.loads(found[0]) if found else None
    current = {s.source_id: s.revision for s in list_sources(stores.meta)}
    return [
        {**ref, "current_revision": current.get(ref["source_id"])}
        for ref in json.loads(row.get("sources") or "[]")
    ]


def record_batch_summary(stores: Stores, batch: BatchRow) -> dict[str, Any]:
    approve, reject = _ACTIONS[batch.kind]
    items = []
    for item in get_items(stores.meta, batch.batch_id):
        row = _row(stores, item.candidate_id)
        entry: dict[str, Any] = {
            "candidate_id": item.candidate_id,
            "record_id": item.candidate_id,
            "decision": item.decision,
            "reviewer": item.reviewer,
            "decision_reason": item.reason,
        }
        if row is None:
            items.append({**entry, "missing": True})
            continue
        entry.update(
            table=row["table"], status=row["status"], subject_id=row.get("subject_id"),
            text=row.get("text"), evidence=_evidence(stores, batch.kind, item.candidate_id, row),
        )  # fmt: skip
        items.append(entry)
    return {**batch.as_dict(), "records": True, "approve": approve, "reject": reject,
            "items": items}  # fmt: skip


def record_summary_markdown(summary: Mapping[str, Any]) -> str:
    lines = [
        f"## Review batch `{summary['batch_id']}`",
        "",
        f"{summary['kind']} of **{summary['tenant_id']}/{summary['namespace']}**: "
        f"{summary['item_count']} record(s), {summary['undecided']} undecided; status "
        f"**{summary['status']}**. Approve = {summary['approve']}; reject = {summary['reject']}.",
        "",
    ]
    for n, item in enumerate(summary["items"], 1):
        if item.get("missing"):
            lines.append(f"### {n}. `{item['record_id']}` (record gone)")
            continue
        lines += [
            f"### {n}. {item['text'] or item['record_id']}",
            "",
            f"`{item['record_id']}` ({item['table']}, {item['status']})",
            "",
            f"- evidence: `{json.dumps(item['evidence'], default=str)}`",
        ]
        if item["decision"]:
            lines.append(f"- decided: **{item['decision']}** by {item['reviewer']}")
        lines.append("")
    return "\n".join(lines)
