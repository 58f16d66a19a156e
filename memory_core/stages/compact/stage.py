"""Compaction: episodes past retention are folded, per cluster, into ``digests`` rows.

Why a template and why one line per source: a digest must keep its sources' key content (the
read path serves it in their place), and forgetting must be able to take one source back out
of it (user deletion, revocation). So the summary is deterministic: a header of counts and time
span, then one line per source, in provenance order::

    4 episodes (3 succeeded, 1 failed), 2026-07-01 to 2026-07-03
    - 2026-07-01 09:00 (success) ana: VPN fails with error 720 | actions: reset adapter | ...
    - 2026-07-02 10:30 (failure) ben: ...

Line ``i`` carries ``provenance[i]`` (source id, content hash, subject). Removing a source
removes its line and provenance entry and recomputes the header from the remaining lines, so
nothing of the removed source stays in the text. The header carries no content (the cluster
label comes from one episode's goal, so it is left out).

Grouping: active episodes older than the episodic TTL of their namespace that belong to a
cluster, per (tenant, namespace, cluster, purpose) -- purpose limits must still apply to the
digest -- in time order, ``digest_max_sources`` episodes per digest. A digest's scope is the
narrowest shared by its sources: the subject when all share one, else tenant scope (subject
null). Its vector is the normalised mean of its sources' vectors (``digest_vector = "mean"``)
or the embedding of its text. Episodes without a cluster are not folded; they expire.
An episode alone in its cluster (among those being folded) would make a digest of one, which
saves nothing: such episodes are grouped by session instead (conversation turns rarely share a
cluster, but a session's turns belong together); the digest's ``cluster_id`` is then null.

Extracted sessions: when the extract stage has taken a session's facts (its mark in
``extract_sessions``), the session's semantic content lives on as facts, so its turns past
retention are folded whole, clustered or not, into one digest per session (chunks of
``session_digest_max_sources`` turns for longer sessions), with one line and one lineage edge
per turn. Conversation turns are rarely clustered, so without this they would simply expire;
with it a session's turns become one row that still says who said what, when.

Crash safety without a cross-store transaction: digest ids are deterministic (scope, cluster,
source ids), digests are inserted first (insert-if-new), lineage edges second, raw episodes
deleted last; an episode that is already a digest's source is only deleted on a rerun.
With ``forget.digest_summary = "llm"`` and an API key, Claude adds a summary to the header
line afterwards (``stages/digest_summary.py``, through the Batches machinery); the lines
stay the template's, so everything above still holds.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.crash import crash_point
from memory_core.embed import Embedder
from memory_core.models import Authority, Sensitivity, content_hash, stable_id
from memory_core.stages.extract.plan import session_key
from memory_core.stages.forget.purge import delete_records
from memory_core.stores import Stores
from memory_core.stores.extract import done_sessions
from memory_core.stores.filters import sql_quote, ts_literal
from memory_core.stores.lineage import Edge, add_edges

__all__ = [
    "CompactResult",
    "compact_episodes",
    "drop_digest_sources",
    "render_digest_text",
]

logger = logging.getLogger(__name__)

_EPISODE_COLUMNS = [
    "episode_id",
    "session_id", "tenant_id", "subject_id", "namespace", "occurred_at", "outcome", "goal",
    "actions", "conditions", "text", "feedback", "purpose", "sensitivity", "authority",
    "importance", "content_hash", "embedding_version", "vector",
]  # fmt: skip
_LINE = re.compile(
    r"^- (?P<at>\d{4}-\d\d-\d\d \d\d:\d\d)(?: \((?P<outcome>success|failure|partial)\))? "
)
MAX_LINE_CHARS = 2000


@dataclass
class CompactResult:
    episodes_folded: int = 0
    digests: int = 0
    already_folded: int = 0
    deleted_ids: list[str] = field(default_factory=list)
    text_hashes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "episodes_folded": self.episodes_folded,
            "digests": self.digests,
            "already_folded": self.already_folded,
        }


def _line(row: dict[str, Any]) -> str:
    at = row["occurred_at"].astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    outcome = row.get("outcome")
    tag = f" ({outcome})" if outcome in ("success", "failure", "partial") else ""
    parts: list[str] = []
    if row.get("goal"):
        parts.append(row["goal"])
    if row.get("actions"):
        parts.append("actions: " + "; ".join(row["actions"]))
    conditions = json.loads(row["conditions"]) if row.get("conditions") else {}
    if conditions:
        parts.append(", ".join(f"{k}={v}" for k, v in sorted(conditions.items())))
    if row.get("text"):
        parts.append(row["text"])
    if row.get("feedback"):
        parts.append("feedback: " + row["feedback"])
    body = " | ".join(parts) or row["episode_id"]
    body = " ".join(body.split())[:MAX_LINE_CHARS]
    return f"- {at}{tag} {row['subject_id']}: {body}"


def _header(lines: list[str]) -> tuple[str, dict[str, Any]]:
    stamps, success, failure = [], 0, 0
    for line in lines:
        match = _LINE.match(line)
        if match is None:
            continue
        stamps.append(match["at"])
        success += match["outcome"] == "success"
        failure += match["outcome"] == "failure"
    first, last = min(stamps), max(stamps)
    counts = f"{success} succeeded, {failure} failed, " if success or failure else ""
    head = f"{len(lines)} episodes ({counts}{first[:10]} to {last[:10]})"
    parse = lambda s: datetime.strptime(s, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)  # noqa: E731
    return head, {
        "episode_count": len(lines),
        "success_count": success,
        "failure_count": failure,
        "first_at": parse(first),
        "last_at": parse(last),
    }


def render_digest_text(lines: list[str]) -> tuple[str, dict[str, Any]]:
    """The digest text for these source lines, and the counts its header states."""
    head, stats = _header(lines)
    return head + "\n" + "\n".join(lines), stats


def drop_digest_sources(
    row: dict[str, Any], lost: set[str], *, embedder: Embedder | None
) -> dict[str, Any] | None:
    """The digest row without the lost sources' lines and provenance; None if none remain."""
    provenance = json.loads(row["provenance"] or "[]")
    lines = (row["text"] or "").split("\n")[1:]
    if len(lines) != len(provenance):
        msg = f"digest {row['digest_id']}: {len(lines)} lines for {len(provenance)} sources"
        raise ValueError(msg)
    keep = [i for i, p in enumerate(provenance) if p["source_id"] not in lost]
    if not keep:
        return None
    lines = [lines[i] for i in keep]
    provenance = [provenance[i] for i in keep]
    text, stats = render_digest_text(lines)
    subjects = {p.get("subject_id") for p in provenance}
    new = {**row, **stats, "text": text, "provenance": json.dumps(provenance, sort_keys=True)}
    new["subject_id"] = subjects.pop() if len(subjects) == 1 else None
    new["content_hash"] = content_hash([provenance, text])
    if embedder is None:
        msg = f"digest {row['digest_id']} lost sources: an embedder is needed to re-embed it"
        raise ValueError(msg)
    new["vector"] = embedder.embed([text])[0].tolist()
    return new


def _past_retention(
    stores: Stores, settings: Settings, now: datetime
) -> dict[str, tuple[str, str, str]]:
    """Active episodes older than their namespace's episodic TTL: id -> (tenant, namespace,
    session key) (three short columns: cheap)."""
    names = stores.lance.scan("episodes", columns=["namespace"], where="status = 'active'")
    ids: dict[str, tuple[str, str, str]] = {}
    for ns in sorted(set(names.column("namespace").to_pylist())):
        policy = settings.forget.policy(ns, "episodic")
        if policy.ttl_days is None:
            continue
        cutoff = now - timedelta(days=policy.ttl_days)
        where = (
            f"status = 'active' AND recorded_to IS NULL AND namespace = {sql_quote(ns)} "
            f"AND occurred_at < {ts_literal(cutoff)}"
        )
        rows = stores.lance.scan(
            "episodes", where=where, columns=["episode_id", "tenant_id", "session_id"]
        ).to_pylist()
        for r in rows:
            key = session_key(r["session_id"], r["episode_id"])
            ids[r["episode_id"]] = (r["tenant_id"], ns, key)
    return ids


def _extracted_sessions(stores: Stores) -> set[tuple[str, str, str]]:
    """(tenant, namespace, session key) of every session the extract stage has taken."""
    return set(done_sessions(stores.meta))


def _rows(stores: Stores, ids: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for start in range(0, len(ids), 2000):
        quoted = ", ".join(sql_quote(i) for i in ids[start : start + 2000])
        out += stores.lance.scan(
            "episodes", where=f"episode_id IN ({quoted})", columns=_EPISODE_COLUMNS
        ).to_pylist()
    return out


def _members(stores: Stores, ids: list[str]) -> tuple[dict[str, str], set[str]]:
    """(episode -> cluster, episodes already a digest's source)."""
    keys = pa.table({"episode_id": pa.array(ids, pa.string())})
    with stores.meta.connect() as con:
        con.register("_ids", keys)
        members = con.execute(
            "SELECT m.episode_id, m.cluster_id FROM cluster_members m JOIN _ids USING (episode_id)"
        ).fetchall()
        folded = con.execute(
            "SELECT DISTINCT l.source_id FROM lineage l JOIN _ids i ON l.source_id = i.episode_id "
            "WHERE l.derived_kind = 'digest'"
        ).fetchall()
    return dict(members), {r[0] for r in folded}


def _lowest(values: list[str], order: list[str]) -> str:
    return min(values, key=order.index)


def _digest(group: list[dict[str, Any]], cluster_id: str | None, unit: str, settings: Settings,
            now: datetime, embedder: Embedder | None) -> dict[str, Any]:  # fmt: skip
    group = sorted(group, key=lambda r: (r["occurred_at"], r["episode_id"]))
    lines = [_line(r) for r in group]
    text, stats = render_digest_text(lines)
    provenance = [
        {
            "source_id": r["episode_id"],
            "source_kind": "episode",
            "content_hash": r["content_hash"],
            "subject_id": r["subject_id"],
        }
        for r in group
    ]
    first = group[0]
    subjects = {r["subject_id"] for r in group}
    # Sources not embedded yet (null vector, see stages/embed) do not count in the mean; a
    # group with none embedded is embedded from the digest's own text.
    embedded = [r for r in group if r["vector"] is not None]
    version = embedded[0]["embedding_version"] if embedded else ""
    if not embedded and embedder is None:
        from memory_core.embed import make_embedder

        embedder = make_embedder(settings.embed)
    if embedder is not None and (settings.forget.digest_vector == "embed" or not embedded):
        vector = embedder.embed([text])[0]
        version = embedder.version
    else:
        mean = np.mean([np.asarray(r["vector"], np.float32) for r in embedded], axis=0)
        vector = mean / max(float(np.linalg.norm(mean)), 1e-12)
    authorities = [a.value for a in sorted(Authority, key=lambda a: a.rank)]
    importance = [r["importance"] for r in group if r["importance"] is not None]
    return {
        "digest_id": stable_id(
            "dig",
            first["tenant_id"],
            first["namespace"],
            unit,
            [r["episode_id"] for r in group],
        ),
        "cluster_id": cluster_id,
        **stats,
        "tenant_id": first["tenant_id"],
        "subject_id": subjects.pop() if len(subjects) == 1 else None,
        "namespace": first["namespace"],
        "status": "active",
        "valid_from": stats["first_at"],
        "valid_to": None,
        "recorded_at": now,
        "recorded_to": None,
        "expires_at": None,
        "sensitivity": _lowest(
            [r["sensitivity"] for r in group], [s.value for s in reversed(Sensitivity)]
        ),
        "purpose": first["purpose"],
        "authority": _lowest([r["authority"] for r in group], authorities),
        "confidence": 1.0,
        "importance": max(importance) if importance else None,
        "provenance": json.dumps(provenance, sort_keys=True),
        "content_hash": content_hash([provenance, text]),
        "embedding_version": version,
        "policy_version": settings.policy.version,
        "text": text,
        "vector": [float(x) for x in vector],
    }


def compact_episodes(
    stores: Stores, settings: Settings, ctx: RunContext, *, embedder: Embedder | None = None
) -> CompactResult:
    """Fold clustered episodes past retention into digests, then delete the raw rows."""
    result = CompactResult()
    if not settings.forget.compact_on_ttl or "episodes" not in stores.lance.table_names():
        return result
    past = _past_retention(stores, settings, ctx.now)
    if not past:
        return result
    ids = sorted(past)
    cluster_of, folded = _members(stores, ids)
    chosen = sorted(folded)
    result.already_folded = len(chosen)
    extracted = _extracted_sessions(stores)
    whole = {e for e, key in past.items() if key in extracted}
    wanted = sorted((set(cluster_of) | whole) - folded)
    if wanted and settings.forget.digest_vector == "embed" and embedder is None:
        from memory_core.embed import make_embedder

        embedder = make_embedder(settings.embed)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    sizes = Counter(cluster_of[e] for e in wanted if e not in whole)
    for row in _rows(stores, wanted):
        if row["episode_id"] in whole:
            unit = ("session", past[row["episode_id"]][2])
        else:
            cluster = cluster_of[row["episode_id"]]
            unit = ("cluster", cluster)
            if sizes[cluster] == 1 and row["session_id"]:
                unit = ("session", row["session_id"])
        key = (row["tenant_id"], row["namespace"], *unit, row["purpose"] or "")
        groups.setdefault(key, []).append(row)
    digests, edges = [], []
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda r: (r["occurred_at"], r["episode_id"]))
        size = settings.forget.digest_max_sources
        if key[2] == "session" and members[0]["episode_id"] in whole:
            size = settings.forget.session_digest_max_sources
        for start in range(0, len(members), size):
            chunk = members[start : start + size]
            cluster_id = key[3] if key[2] == "cluster" else None
            digest = _digest(chunk, cluster_id, key[3], settings, ctx.now, embedder)
            digests.append(digest)
            chosen.extend(r["episode_id"] for r in chunk)
            edges.extend(
                Edge(digest["digest_id"], "digest", r["episode_id"], "episode",
                     r["content_hash"], r["tenant_id"], r["subject_id"])
                for r in chunk
            )  # fmt: skip
    if digests:
        schema = stores.lance.table("digests").schema
        stores.lance.insert_new("digests", pa.Table.from_pylist(digests, schema=schema))
        crash_point("compact.digests_written")
        with stores.meta.transaction() as con:
            add_edges(con, edges, now=ctx.now)
        crash_point("compact.lineage_written")
    if chosen:
        deleted = delete_records(stores, "episodes", chosen, ctx=ctx, folded=True)
        result.deleted_ids = deleted.ids
        result.text_hashes = deleted.text_hashes
    result.digests = len(digests)
    result.episodes_folded = len(chosen) - result.already_folded
    logger.info(
        "compact run=%s digests=%d folded=%d", ctx.run_id, result.digests, result.episodes_folded
    )
    return result
