"""Episodes compaction folded into a digest, read back as episode-shaped rows.

A compaction is not a deletion of content: each folded episode keeps one line of its digest
(line ``i`` is ``provenance[i]``: source id, content hash, subject) and a lineage edge
episode -> digest. What cites the episode as evidence (extracted facts, candidates, the
commit gate) resolves it here instead of losing it. A line taken out of its digest (user
deletion, revocation: ``stages/compact.drop_digest_sources``) also loses its edge, so a
forgotten episode never comes back through this path.

The row carries the line (``text``, minute-precision ``occurred_at``, outcome) and what the
digest holds for all its sources (status, sensitivity, purpose, expiry, namespace), plus
``folded_into`` naming the digest. Fields a digest does not keep (source role, claims, goal,
session) are None: callers that know them from elsewhere fill them in (an extracted fact's
session, and ``user`` for a turn its ``self_evidence`` names: extraction derived that from
the turn's source role, in code).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from memory_core.stores.filters import sql_quote
from memory_core.stores.lance import LanceStore
from memory_core.stores.meta import MetaStore

__all__ = ["folded_episodes"]

# A digest line as stages/compact writes it: "- YYYY-MM-DD HH:MM (outcome)? subject: body".
_LINE = re.compile(
    r"^- (?P<at>\d{4}-\d\d-\d\d \d\d:\d\d)(?: \((?P<outcome>success|failure|partial)\))? "
    r"[^:]*: (?P<body>.*)$"
)
_DIGEST_COLUMNS = ["digest_id", "tenant_id", "namespace", "status", "sensitivity", "purpose",
                   "expires_at", "provenance", "text"]  # fmt: skip
_CHUNK = 500


def folded_episodes(
    lance: LanceStore, meta: MetaStore, tenant_id: str, ids: Iterable[str]
) -> dict[str, dict[str, Any]]:
    """Episode-shaped rows of the tenant's episodes among ``ids`` that live on in a digest."""
    wanted = sorted(set(ids))
    if not wanted or "digests" not in lance.table_names():
        return {}
    with meta.connect() as con:
        edges = con.execute(
            "SELECT DISTINCT derived_id FROM lineage WHERE derived_kind = 'digest' "
            "AND source_kind = 'episode' AND list_contains(?, source_id)",
            [wanted],
        ).fetchall()
    digest_ids = sorted(r[0] for r in edges)
    keep = set(wanted)
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(digest_ids), _CHUNK):
        chunk = ", ".join(sql_quote(i) for i in digest_ids[start : start + _CHUNK])
        where = f"tenant_id = {sql_quote(tenant_id)} AND digest_id IN ({chunk})"
        for d in lance.scan("digests", where=where, columns=_DIGEST_COLUMNS).to_pylist():
            lines = (d["text"] or "").split("\n")[1:]
            for p, line in zip(json.loads(d["provenance"] or "[]"), lines, strict=False):
                match = _LINE.match(line)
                if p.get("source_id") not in keep or match is None:
                    continue
                at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
                out[p["source_id"]] = {
                    "episode_id": p["source_id"], "tenant_id": d["tenant_id"],
                    "namespace": d["namespace"], "subject_id": p.get("subject_id"),
                    "session_id": None, "status": d["status"],
                    "source_role": None, "occurred_at": at, "goal": None,
                    "outcome": match["outcome"], "claims": None, "text": match["body"],
                    "content_hash": p.get("content_hash"), "sensitivity": d["sensitivity"],
                    "purpose": d["purpose"], "expires_at": d["expires_at"], "sources": None,
                    "procedure_id": None, "folded_into": d["digest_id"],
                }  # fmt: skip
    return out
