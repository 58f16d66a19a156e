"""Control-plane tables of fact extraction: sessions done, and the facts extracted from them.

Extracted facts are tentative evidence, never memory agents read: they feed the claims path
(``stages/mine``), which turns enough of them into candidates for scoring and review. They
live in DuckDB beside the candidates for that reason.

* ``extract_sessions``: one row per (tenant, namespace, session) that was extracted, with the
  content hash of what was sent, the model and the prompt version. A session whose row
  matches all three is not sent again: an unchanged rerun makes no request.
* ``extracted_facts``: validated facts (the rules of ``stages/extract/rules.py`` already
  applied), keyed by a deterministic id; ``group_predicate`` / ``group_object`` name the
  representative a paraphrase was merged into.

Replacing a session's facts and marking it done happen in one transaction with the answer's
cache entry and spend (``llm.record_answers_and_spend(also=...)``), so a crash leaves either
nothing or everything of one answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict, Field

from memory_core.stores.meta import MetaStore

__all__ = [
    "DoneSession",
    "ExtractedFactRow",
    "done_sessions",
    "extracted_facts",
    "fact_digests",
    "fact_partitions",
    "facts_for_episodes",
    "set_fact_groups",
    "ungrouped_subjects",
    "write_extraction",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class DoneSession(BaseModel):
    """A session extracted under (content hash, model, prompt version)."""

    model_config = _FROZEN
    tenant_id: str
    namespace: str
    session_key: str
    content_hash: str
    model: str
    prompt_version: str
    custom_id: str | None = None
    facts: int = 0


class ExtractedFactRow(BaseModel):
    """One validated fact; ``evidence`` are episode ids of the request, ``self_evidence`` the
    subset said by the subject themself as a user (what gives ``user_statement`` authority)."""

    model_config = _FROZEN
    fact_id: str
    tenant_id: str
    namespace: str
    subject_id: str
    session_key: str
    predicate: str
    object: str
    kind: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    evidence: list[str]
    self_evidence: list[str] = Field(default_factory=list)
    authority: str
    speaker_role: str | None = None
    importance: int | None = None
    source: str = Field(description="anthropic | replay")
    custom_id: str | None = None
    model: str | None = None
    prompt_version: str | None = None
    group_predicate: str | None = None
    group_object: str | None = None


_FACT_COLUMNS = (
    "fact_id, tenant_id, namespace, subject_id, session_key, predicate, object, kind, "
    "valid_from, valid_to, evidence, self_evidence, authority, speaker_role, importance, "
    "source, custom_id, model, prompt_version, group_predicate, group_object"
)


def done_sessions(meta: MetaStore) -> dict[tuple[str, str, str], DoneSession]:
    """Every extracted session by (tenant, namespace, session key)."""
    with meta.connect() as con:
        rows = con.execute(
            "SELECT tenant_id, namespace, session_key, content_hash, model, prompt_version, "
            "custom_id, facts FROM extract_sessions"
        ).fetchall()
    return {
        (r[0], r[1], r[2]): DoneSession(
            tenant_id=r[0], namespace=r[1], session_key=r[2], content_hash=r[3], model=r[4],
            prompt_version=r[5], custom_id=r[6], facts=r[7] or 0,
        )
        for r in rows
    }  # fmt: skip


def write_extraction(
    con: duckdb.DuckDBPyConnection,
    sessions: Sequence[DoneSession],
    facts: Sequence[ExtractedFactRow],
    *,
    run_id: str,
    now: datetime,
) -> None:
    """Inside the caller's transaction: replace the sessions' facts, mark the sessions done."""
    for s in sessions:
        con.execute(
            "DELETE FROM extracted_facts WHERE tenant_id = ? AND namespace = ? AND session_key = ?",
            [s.tenant_id, s.namespace, s.session_key],
        )
        con.execute(
            """INSERT INTO extract_sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (tenant_id, namespace, session_key) DO UPDATE SET
            content_hash = excluded.content_hash, model = excluded.model,
            prompt_version = excluded.prompt_version, custom_id = excluded.custom_id,
            facts = excluded.facts, run_id = excluded.run_id,
            extracted_at = excluded.extracted_at""",
            [s.tenant_id, s.namespace, s.session_key, s.content_hash, s.model,
             s.prompt_version, s.custom_id, s.facts, run_id, now],
        )  # fmt: skip
    rows = [_fact_row(f, run_id=run_id, now=now) for f in facts]
    if rows:
        marks = ", ".join("?" * len(rows[0]))
        con.executemany(
            f"INSERT INTO extracted_facts ({_FACT_COLUMNS}, run_id, created_at) VALUES ({marks}) "
            "ON CONFLICT (fact_id) DO NOTHING",
            rows,
        )


def _fact_row(f: ExtractedFactRow, *, run_id: str, now: datetime) -> tuple[Any, ...]:
    return (
        f.fact_id, f.tenant_id, f.namespace, f.subject_id, f.session_key, f.predicate, f.object,
        f.kind, f.valid_from, f.valid_to, json.dumps(f.evidence), json.dumps(f.self_evidence),
        f.authority, f.speaker_role, f.importance, f.source, f.custom_id, f.model,
        f.prompt_version, f.group_predicate, f.group_object, run_id, now,
    )  # fmt: skip


def fact_partitions(meta: MetaStore) -> set[tuple[str, str]]:
    """The (tenant, namespace) pairs holding an extracted fact."""
    with meta.connect() as con:
        rows = con.execute("SELECT DISTINCT tenant_id, namespace FROM extracted_facts").fetchall()
    return {(tenant, namespace) for tenant, namespace in rows}


def extracted_facts(
    meta: MetaStore,
    *,
    tenant_id: str | None = None,
    namespace: str | None = None,
    subject_ids: Iterable[str] | None = None,
) -> list[ExtractedFactRow]:
    """Facts in a scope, ordered by id (deterministic for the claims path)."""
    where, params = ["TRUE"], []
    if tenant_id is not None:
        where.append("tenant_id = ?")
        params.append(tenant_id)
    if namespace is not None:
        where.append("namespace = ?")
        params.append(namespace)
    if subject_ids is not None:
        where.append("list_contains(?, subject_id)")
        params.append(sorted(set(subject_ids)))
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT {_FACT_COLUMNS} FROM extracted_facts WHERE {' AND '.join(where)} "
            "ORDER BY fact_id",
            params,
        ).fetchall()
    names = [c.strip() for c in _FACT_COLUMNS.split(",")]
    out = []
    for row in rows:
        data = dict(zip(names, row, strict=True))
        data["evidence"] = json.loads(data["evidence"])
        data["self_evidence"] = json.loads(data["self_evidence"])
        out.append(ExtractedFactRow.model_validate(data))
    return out


def set_fact_groups(meta: MetaStore, groups: dict[str, tuple[str, str]]) -> None:
    """Record the representative (predicate, object) each fact was merged into."""
    if not groups:
        return
    with meta.transaction() as con:
        con.executemany(
            "UPDATE extracted_facts SET group_predicate = ?, group_object = ? WHERE fact_id = ?",
            [(p, o, fid) for fid, (p, o) in sorted(groups.items())],
        )


def ungrouped_subjects(meta: MetaStore) -> set[tuple[str, str, str]]:
    """(tenant, namespace, subject) with a fact not yet merged (a crash between the write and
    the merge leaves these; the next run merges them)."""
    with meta.connect() as con:
        rows = con.execute(
            "SELECT DISTINCT tenant_id, namespace, subject_id FROM extracted_facts "
            "WHERE group_predicate IS NULL"
        ).fetchall()
    return {(r[0], r[1], r[2]) for r in rows}


def fact_digests(meta: MetaStore) -> dict[tuple[str, str], str]:
    """Per (tenant, namespace), a hash of its extracted facts and their groups: what the
    nightly flow adds to a partition's input hash."""
    with meta.connect() as con:
        rows = con.execute(
            "SELECT tenant_id, namespace, md5(string_agg(fact_id || '|' || "
            "coalesce(group_predicate, '') || '|' || coalesce(group_object, ''), ',' "
            "ORDER BY fact_id)) FROM extracted_facts GROUP BY 1, 2"
        ).fetchall()
    return {(r[0], r[1]): str(r[2]) for r in rows}


def facts_for_episodes(meta: MetaStore, episode_ids: Iterable[str]) -> list[ExtractedFactRow]:
    """Facts whose own-statement evidence includes any of these episodes."""
    ids = sorted(set(episode_ids))
    if not ids:
        return []
    with meta.connect() as con:
        found = [
            r[0]
            for r in con.execute(
                "SELECT fact_id FROM extracted_facts WHERE "
                "len(list_intersect(CAST(self_evidence AS VARCHAR[]), ?)) > 0",
                [ids],
            ).fetchall()
        ]
    wanted = set(found)
    return [f for f in extracted_facts(meta) if f.fact_id in wanted] if wanted else []
