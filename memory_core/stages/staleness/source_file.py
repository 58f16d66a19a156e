"""``memctl sources update FILE.jsonl``: record the current revision of corpus sources.

One JSON object a line: ``{"source_id": str, "revision": str, "changed_at": RFC3339,
"deleted": bool = false}``. Every bad line is reported (line, field, reason) and nothing is
written unless all are good. An update older than the stored revision of its source is ignored
(files replayed out of order converge on the latest), and so is a repeat of the stored one.
The next nightly run marks records bound to older revisions stale and revokes what depends on
deleted sources alone (``revisions.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memory_core.context import RunContext
from memory_core.errors import FieldError, ValidationFailed
from memory_core.models import UtcDatetime
from memory_core.stores import Stores
from memory_core.stores.audit import record_audit
from memory_core.stores.sources import SourceRevision, upsert_sources

__all__ = ["SourceUpdate", "update_sources"]


class SourceUpdate(BaseModel):
    """One line of a sources file."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source_id: str = Field(min_length=1, max_length=500)
    revision: str = Field(min_length=1, max_length=200)
    changed_at: UtcDatetime
    deleted: bool = False


def _parse(lines: Iterable[str], path: str) -> list[SourceUpdate]:
    records: list[SourceUpdate] = []
    errors: list[FieldError] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(FieldError(number, "<line>", f"not JSON: {exc.msg}"))
            continue
        sid = raw.get("source_id") if isinstance(raw, dict) else None
        try:
            records.append(SourceUpdate.model_validate(raw))
        except ValidationError as exc:
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"]) or "<record>"
                label = f"{where} (source_id={sid})" if sid else where
                errors.append(FieldError(number, label, err["msg"]))
    if errors:
        raise ValidationFailed(path, errors)
    return records


def update_sources(
    stores: Stores, ctx: RunContext, lines: Iterable[str], *, path: str = "<stdin>"
) -> dict[str, Any]:
    """Validate every line, then store the newer revisions in one transaction."""
    records = _parse(lines, path)
    latest: dict[str, SourceUpdate] = {}
    for rec in records:  # the same source twice in one file: the later change wins
        have = latest.get(rec.source_id)
        if have is None or rec.changed_at >= have.changed_at:
            latest[rec.source_id] = rec
    revisions = [
        SourceRevision(r.source_id, r.revision, r.changed_at, r.deleted)
        for r in sorted(latest.values(), key=lambda r: r.source_id)
    ]
    if ctx.dry_run:
        return {"records": len(records), "applied": [], "ignored": []}
    with stores.meta.transaction() as con:
        applied, ignored = upsert_sources(con, revisions, now=ctx.now)
        record_audit(
            con, at=ctx.now, action="sources_update", run_id=ctx.run_id, actor=ctx.actor,
            target=path, counts={"records": len(records), "applied": len(applied),
                                 "ignored": len(ignored)},
            detail={"applied": applied, "ignored": ignored},
        )  # fmt: skip
    deleted = [r.source_id for r in revisions if r.deleted and r.source_id in applied]
    return {
        "records": len(records),
        "applied": applied,
        "ignored": ignored,
        "deleted": deleted,
        "next": "the next nightly run (memctl consolidate) marks stale / revokes",
    }
