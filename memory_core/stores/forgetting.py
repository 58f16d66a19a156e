"""DuckDB side of forgetting: deletion requests, receipts, access statistics, subject purge.

Why a registry of tables: a deletion is only complete if it reaches every table that can hold
a subject's content. ``SUBJECT_TABLES`` says, for every DuckDB table, which columns identify a
subject's content and what deletion does there; ``unclassified_tables`` compares it with
``information_schema`` so a table added by a later migration fails a test (and is reported in
every deletion receipt) instead of being forgotten silently. Verification does not trust the
registry: ``find_needles`` scans every text column of every table.

Deletion requests name the subject in clear only while they are queued; when a request is
done its target is replaced by a hash, so the queue itself does not keep what was forgotten.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import duckdb
import pyarrow as pa

from memory_core.models import stable_id
from memory_core.stores.access_stats import (
    access_stats,
    decay_victims,
    fold_access_rows,
    folded_files,
)
from memory_core.stores.derived import (
    candidates_citing,
    clusters_of_members,
    remaining_members,
    rewrite_candidates,
    save_cluster_changes,
    sources_of_many,
    subject_candidates,
    subject_sources,
)
from memory_core.stores.meta import MetaStore
from memory_core.stores.status_writes import MetaStatuses, write_status

__all__ = [
    "SUBJECT_TABLES",
    "DeletionRequest",
    "TableRule",
    "access_stats",
    "candidates_citing",
    "clusters_of_members",
    "decay_victims",
    "ended_purposes",
    "enqueue_request",
    "find_needles",
    "finish_request",
    "fold_access_rows",
    "folded_files",
    "get_request",
    "keep_needles",
    "literal_pattern",
    "pending_requests",
    "purge_record_rows",
    "purge_subject_rows",
    "quotes_left",
    "remaining_members",
    "rewrite_candidates",
    "save_cluster_changes",
    "scrub_quotes",
    "sources_of_many",
    "subject_candidates",
    "subject_hash",
    "subject_sources",
    "table_columns",
    "unclassified_tables",
    "values_left",
]

Action = Literal["delete", "rewrite", "scrub", "hash", "none"]


@dataclass(frozen=True)
class TableRule:
    """How user deletion treats one DuckDB table, and why."""

    action: Action
    columns: tuple[str, ...]
    why: str


SUBJECT_TABLES: dict[str, TableRule] = {
    "schema_version": TableRule("none", (), "migration bookkeeping"),
    "runs": TableRule("none", (), "run parameters and counts, never content"),
    "stage_ledger": TableRule("none", (), "partition keys, input hashes and counts"),
    "watermarks": TableRule("none", (), "per-partition transaction times"),
    "llm_batches": TableRule("none", (), "candidate ids and content hashes of requests"),
    "llm_ledger": TableRule("none", (), "tokens and cost"),
    "review_batches": TableRule("none", (), "batch scope and counts"),
    "receipts": TableRule("scrub", ("body",), "ids (e.g. a revoked episode) -> [forgotten]"),
    "lineage": TableRule(
        "delete", ("subject_id", "source_id", "derived_id"), "edges from/to the subject's records"
    ),
    "quarantine": TableRule(
        "delete", ("subject_id", "episode_id", "raw"), "rejected input lines of the subject"
    ),
    "embedding_cache": TableRule(
        "delete", ("content_hash",), "vectors of the subject's texts, keyed by text hash"
    ),
    "cluster_members": TableRule("delete", ("subject_id", "episode_id"), "memberships"),
    "clusters": TableRule(
        "rewrite", ("centroid", "label", "size"), "centroid/label recomputed without the subject"
    ),
    "candidates": TableRule(
        "rewrite", ("subject_id", "body"), "subject scope deleted; tenant scope re-checked"
    ),
    "candidate_evidence": TableRule("delete", ("subject_id", "episode_id"), "evidence rows"),
    "review_items": TableRule("delete", ("candidate_id", "edits"), "decisions on its candidates"),
    "score_cache": TableRule("delete", ("candidate_id", "body"), "LLM answers quoting evidence"),
    "access_stats": TableRule("delete", ("subject_id", "record_id"), "reads of its records"),
    "audit_log": TableRule("scrub", ("target", "detail"), "ids replaced by [forgotten]"),
    "deletion_requests": TableRule("hash", ("target",), "target replaced by its hash when done"),
    "deletion_needles": TableRule(
        "delete",
        ("value",),
        "a deletion's own texts, text hashes and values, kept for a rerun after a crash; "
        "deleted with its receipt (never searched as residue while it runs)",
    ),
    "source_revisions": TableRule("none", (), "corpus document ids and revisions, no user text"),
    "contest_evidence": TableRule(
        "delete", ("record_id", "episode_id"), "the subject's contradicting statements"
    ),
    "canaries": TableRule("none", (), "procedure versions and outcome counts, no subject ids"),
    "leases": TableRule("none", (), "which run (pid, host) holds the home"),
    "extract_sessions": TableRule(
        "delete", ("session_key",), "done marks of sessions with the subject's extracted facts"
    ),
    "mine_units": TableRule(
        "none",
        (),
        "unit keys (cluster ids, error codes), input fingerprints, candidate ids: "
        "a unit that held the subject's episodes gets another fingerprint and is mined again",
    ),
    "extracted_facts": TableRule(
        "delete", ("subject_id", "evidence"), "facts about the subject or resting on its records"
    ),
}

FORGOTTEN = "[forgotten]"


def subject_hash(tenant_id: str | None, subject_id: str) -> str:
    """Stable, non-reversible-by-lookup name of a forgotten subject for receipts."""
    return "sha256:" + hashlib.sha256(f"{tenant_id or '*'}\x1f{subject_id}".encode()).hexdigest()


def unclassified_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """DuckDB tables that ``SUBJECT_TABLES`` does not classify (a new migration's tables)."""
    names = [r[0] for r in con.execute(_TABLES_SQL).fetchall()]
    return sorted(n for n in names if n not in SUBJECT_TABLES)


_TABLES_SQL = (
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
    "AND table_catalog = current_database() AND table_type = 'BASE TABLE' ORDER BY 1"
)


# -- deletion requests ------------------------------------------------------------------------


@dataclass(frozen=True)
class DeletionRequest:
    request_id: str
    kind: str  # subject | episode | purpose
    target: str
    tenant_id: str | None
    requested_at: datetime
    status: str
    receipt_id: str | None = None


def enqueue_request(
    meta: MetaStore, *, kind: str, target: str, tenant_id: str | None, now: datetime
) -> str:
    """Queue a deletion; the same (kind, target, tenant) still pending is not queued twice."""
    with meta.transaction() as con:
        row = con.execute(
            "SELECT request_id FROM deletion_requests WHERE kind = ? AND target = ? "
            "AND tenant_id IS NOT DISTINCT FROM ? AND status = 'pending'",
            [kind, target, tenant_id],
        ).fetchone()
        if row is not None:
            return str(row[0])
        request_id = stable_id("del", kind, target, tenant_id, now.isoformat())
        con.execute(
            "INSERT INTO deletion_requests VALUES (?, ?, ?, ?, ?, 'pending', NULL, NULL) "
            "ON CONFLICT DO NOTHING",
            [request_id, kind, target, tenant_id, now],
        )
    return request_id


def _request(row: tuple[Any, ...]) -> DeletionRequest:
    return DeletionRequest(row[0], row[1], row[2], row[3], row[4], row[5], row[6])


_REQUEST_COLUMNS = "request_id, kind, target, tenant_id, requested_at, status, receipt_id"


def pending_requests(meta: MetaStore, *, limit: int = 100) -> list[DeletionRequest]:
    with meta.connect() as con:
        rows = con.execute(
            f"SELECT {_REQUEST_COLUMNS} FROM deletion_requests WHERE status = 'pending' "
            "ORDER BY requested_at, request_id LIMIT ?",
            [limit],
        ).fetchall()
    return [_request(r) for r in rows]


def get_request(meta: MetaStore, request_id: str) -> DeletionRequest | None:
    with meta.connect() as con:
        row = con.execute(
            f"SELECT {_REQUEST_COLUMNS} FROM deletion_requests WHERE request_id = ?", [request_id]
        ).fetchone()
    return _request(row) if row else None


def finish_request(
    con: duckdb.DuckDBPyConnection,
    request_id: str,
    *,
    status: str,
    done_at: datetime,
    receipt_id: str | None,
    target: str | None = None,
) -> None:
    """Close a request (inside the caller's transaction); ``target`` replaces the clear one."""
    closed = MetaStatuses(con, {request_id: status}, table="deletion_requests")
    write_status(None, closed, at=done_at)
    con.execute("DELETE FROM deletion_needles WHERE request_id = ?", [request_id])
    con.execute(
        "UPDATE deletion_requests SET done_at = ?, receipt_id = ?, "
        "target = coalesce(?, target) WHERE request_id = ?",
        [done_at, receipt_id, target, request_id],
    )


NEEDLE_KINDS = ("text", "hash", "value")


def keep_needles(
    meta: MetaStore, request_id: str, found: dict[str, Sequence[str]]
) -> dict[str, list[str]]:
    """What the deletion ``request_id`` must look for, by kind (``NEEDLE_KINDS``): ``found``
    now plus what an earlier, interrupted run of it kept, stored (committed) before the run
    deletes anything. Why: once a run has deleted the target's rows, a rerun reads no texts
    and no values from them, and its receipt would check fewer needles than the first run
    found while saying nothing about it. ``finish_request`` deletes them with the receipt."""
    with meta.transaction() as con:
        rows = con.execute(
            "SELECT kind, value FROM deletion_needles WHERE request_id = ?", [request_id]
        ).fetchall()
        kept: dict[str, set[str]] = {kind: set() for kind in NEEDLE_KINDS}
        for kind, value in rows:
            kept.setdefault(kind, set()).add(value)
        new = [
            (request_id, kind, value)
            for kind in NEEDLE_KINDS
            for value in sorted(set(found.get(kind, ())) - kept[kind])
            if value
        ]
        if new:  # one bulk insert: a subject's texts can be thousands (executemany: ~1 ms each)
            rows_in = pa.table({
                "request_id": [r[0] for r in new], "kind": [r[1] for r in new],
                "value": [r[2] for r in new],
            })  # fmt: skip
            con.register("_new_needles", rows_in)
            try:
                con.execute("INSERT INTO deletion_needles SELECT * FROM _new_needles")
            finally:
                con.unregister("_new_needles")
        for _, kind, value in new:
            kept[kind].add(value)
    return {kind: sorted(values) for kind, values in kept.items()}


def ended_purposes(meta: MetaStore) -> list[tuple[str, str | None]]:
    """(purpose, tenant or None for every tenant) of every purpose someone ended."""
    with meta.connect() as con:
        rows = con.execute(
            "SELECT DISTINCT target, tenant_id FROM deletion_requests "
            "WHERE kind = 'purpose' AND status = 'done' ORDER BY 1, 2"
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


# -- purge and verification --------------------------------------------------------------------


def _tenant_clause(tenant_id: str | None) -> tuple[str, list[Any]]:
    return ("AND tenant_id = ?", [tenant_id]) if tenant_id is not None else ("", [])


def purge_subject_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    subject_id: str | None,
    tenant_id: str | None,
    record_ids: list[str],
    text_hashes: list[str],
    candidate_ids: list[str],
) -> dict[str, int]:
    """Delete/scrub the subject's rows in every classified table (caller's transaction).

    ``record_ids``: the subject's Lance records (episodes, facts, procedures, digests) and
    deleted derived records; ``candidate_ids``: candidates deleted outright (subject scope);
    ``text_hashes``: embedding-cache keys recomputed from the deleted rows' texts.
    """
    ids = sorted(set(record_ids))
    cands = sorted(set(candidate_ids))
    tenant, tparams = _tenant_clause(tenant_id)
    # episode mode has no subject: a NUL id matches no row, so the subject clauses are inert
    subject_id = subject_id if subject_id is not None else "\x00"
    counts: dict[str, int] = {}

    def run(table: str, sql: str, params: list[Any]) -> None:
        before = _count(con, table)
        con.execute(sql, params)
        counts[table] = counts.get(table, 0) + before - _count(con, table)

    run(
        "lineage",
        f"DELETE FROM lineage WHERE (subject_id = ? {tenant}) OR list_contains(?, source_id) "
        "OR list_contains(?, derived_id)",
        [subject_id, *tparams, ids, ids],
    )
    run(
        "quarantine",
        f"DELETE FROM quarantine WHERE (subject_id = ? {tenant}) OR list_contains(?, episode_id) "
        "OR list_contains(?, quarantine_id)",
        [subject_id, *tparams, ids, _raw_naming(con, subject_id, tenant_id)],
    )
    run(
        "embedding_cache",
        "DELETE FROM embedding_cache WHERE list_contains(?, content_hash)",
        [sorted(set(text_hashes))],
    )
    run(
        "cluster_members",
        f"DELETE FROM cluster_members WHERE (subject_id = ? {tenant}) "
        "OR list_contains(?, episode_id)",
        [subject_id, *tparams, ids],
    )
    in_tenant = (
        "AND candidate_id IN (SELECT candidate_id FROM candidates WHERE tenant_id = ?)"
        if tenant_id is not None
        else ""
    )
    run(
        "candidate_evidence",
        f"DELETE FROM candidate_evidence WHERE (subject_id = ? {in_tenant}) "
        "OR list_contains(?, episode_id) OR list_contains(?, candidate_id)",
        [subject_id, *tparams, ids, cands],
    )
    run(
        "candidates",
        f"DELETE FROM candidates WHERE (subject_id = ? {tenant}) OR list_contains(?, candidate_id)",
        [subject_id, *tparams, cands],
    )
    run("review_items", "DELETE FROM review_items WHERE list_contains(?, candidate_id)", [cands])
    # candidate scores, and digest summaries (keyed by digest id: stages/digest_summary.py)
    run(
        "score_cache",
        "DELETE FROM score_cache WHERE list_contains(?, candidate_id)",
        [sorted(set(cands) | set(ids))],
    )
    run(
        "access_stats",
        f"DELETE FROM access_stats WHERE (subject_id = ? {tenant}) OR list_contains(?, record_id)",
        [subject_id, *tparams, ids],
    )
    run(
        "contest_evidence",
        "DELETE FROM contest_evidence WHERE list_contains(?, episode_id) "
        "OR list_contains(?, record_id)",
        [ids, ids],
    )
    _purge_extracted(run, subject_id=subject_id, tenant=tenant, tparams=tparams, ids=ids)
    # a review decision's audit detail lists its candidate ids: the subject's go too
    counts["audit_log+receipts scrubbed"] = _scrub_audit(con, [subject_id, *ids, *cands], tenant_id)
    for table in [t for t, n in counts.items() if not n]:
        del counts[table]
    return counts


_EXTRACTED_HIT = (
    "(subject_id = ? {tenant}) OR len(list_intersect(CAST(evidence AS VARCHAR[]), ?)) > 0"
)


def _purge_extracted(
    run: Any, *, subject_id: str, tenant: str, tparams: list[Any], ids: list[str]
) -> None:
    """Extracted facts about the subject or evidenced by its records, the done marks of their
    sessions (re-extracted from what is left) and cached extraction answers naming it."""
    hit = _EXTRACTED_HIT.format(tenant=tenant)
    params = [subject_id, *tparams, ids]
    sessions = (
        "SELECT custom_id FROM extract_sessions WHERE (tenant_id, namespace, session_key) IN "
        f"(SELECT tenant_id, namespace, session_key FROM extracted_facts WHERE {hit})"
    )
    run(
        "score_cache",
        "DELETE FROM score_cache WHERE prompt_version LIKE 'extract%' AND "
        f"(contains(body::VARCHAR, ?) OR candidate_id IN ({sessions}))",
        [json.dumps(subject_id), *params],
    )
    run(
        "extract_sessions",
        "DELETE FROM extract_sessions WHERE (tenant_id, namespace, session_key) IN "
        f"(SELECT tenant_id, namespace, session_key FROM extracted_facts WHERE {hit})",
        params,
    )
    run("extracted_facts", f"DELETE FROM extracted_facts WHERE {hit}", params)


# Characters an id is made of: a subject named in raw text counts only where it stands alone
# ("ann" is not named by "joanna" or "ann.lee"); RE2 has no look-behind, hence the groups.
_ID_CHARS = r"A-Za-z0-9_.@\-"


def word_pattern(name: str) -> str:
    """RE2/Python pattern matching ``name`` as a whole id inside free text."""
    return f"(^|[^{_ID_CHARS}]){re.escape(name)}($|[^{_ID_CHARS}])"


def _spellings(name: str) -> list[str]:
    """The name as raw input may hold it: plain, and JSON-escaped (non-ASCII as \\uXXXX)."""
    return sorted({name, json.dumps(name)[1:-1]})


def _raw_naming(
    con: duckdb.DuckDBPyConnection, subject_id: str, tenant_id: str | None
) -> list[str]:
    """Quarantined lines whose raw text names the subject although no field was parsed.

    A line rejected because its JSON is truncated has no parsed tenant or subject; its raw
    text can still name the subject (``..."subject_id": "S`` cut before the closing quote).
    With a tenant, lines of another parsed tenant are left alone; unparsed ones go.
    """
    hits: list[str] = []
    for spelling in _spellings(subject_id):
        rows = con.execute(
            "SELECT quarantine_id FROM quarantine WHERE regexp_matches(raw, ?) "
            "AND (? IS NULL OR tenant_id IS NULL OR tenant_id = ?)",
            [word_pattern(spelling), tenant_id, tenant_id],
        ).fetchall()
        hits += [r[0] for r in rows]
    return sorted(set(hits))


# Free text people typed about a batch (a review reason, an audit note) may quote what a
# subject said; their statements are replaced there, the decision itself stays.
TYPED_TEXT = (
    ("review_batches", "reason"),
    ("review_items", "reason"),
    ("candidates", "reason"),
    ("audit_log", "detail"),
)


def _quotes_any(
    con: duckdb.DuckDBPyConnection, table: str, column: str, texts: Sequence[str]
) -> bool:
    """Whether any row of ``table.column`` holds any spelling of any of ``texts``: one query
    per table (the usual answer is no) instead of one per text and spelling."""
    spellings = sorted({sp for text in set(texts) for sp in _spellings(text)})
    cast = f'"{column}"::VARCHAR'
    for start in range(0, len(spellings), 200):
        part = spellings[start : start + 200]
        where = " OR ".join([f"contains({cast}, ?)"] * len(part))
        row = con.execute(f"SELECT count(*) FROM {table} WHERE {where}", part).fetchone()
        if row and row[0]:
            return True
    return False


def scrub_quotes(con: duckdb.DuckDBPyConnection, texts: Sequence[str]) -> int:
    """Replace the subject's verbatim statements in typed free text; rows changed."""
    changed = 0
    for table, column in TYPED_TEXT:
        if not _quotes_any(con, table, column, texts):
            continue
        for text in sorted(set(texts)):
            for spelling in _spellings(text):
                cast = f'"{column}"::VARCHAR'
                row = con.execute(
                    f"SELECT count(*) FROM {table} WHERE contains({cast}, ?)", [spelling]
                ).fetchone()
                if not row or not row[0]:
                    continue
                changed += int(row[0])
                value = f"replace({cast}, ?, ?)"
                if column == "detail":
                    value = f"({value})::JSON"
                con.execute(
                    f'UPDATE {table} SET "{column}" = {value} WHERE contains({cast}, ?)',
                    [spelling, FORGOTTEN, spelling],
                )
    return changed


def quotes_left(meta: MetaStore, texts: Sequence[str]) -> dict[str, int]:
    """Rows of typed free text still quoting one of ``texts``: {table: rows}."""
    hits: dict[str, int] = {}
    with meta.connect() as con:
        for table, column in TYPED_TEXT:
            if not _quotes_any(con, table, column, texts):
                continue
            for text in sorted(set(texts)):
                for spelling in _spellings(text):
                    row = con.execute(
                        f'SELECT count(*) FROM {table} WHERE contains("{column}"::VARCHAR, ?)',
                        [spelling],
                    ).fetchone()
                    if row and row[0]:
                        hits[table] = hits.get(table, 0) + int(row[0])
    return hits


def purge_record_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    record_ids: list[str],
    text_hashes: list[str],
    folded: bool = False,
) -> dict[str, int]:
    """Hard delete of expired/compacted records: memberships, access stats, cached vectors.

    Lineage edges stay: a promoted fact keeps naming the (now deleted) episodes it rests on.
    ``folded``: the records' content lives on in a digest (compaction, with a lineage edge per
    record), so the extracted facts they are evidence of stay: a compaction is not a deletion
    of content. Their evidence resolves through the lineage (``stages/extract/statements``);
    the same holds for the contests they are evidence in (``contest_evidence``). A user
    deletion or revocation still reaches both.
    """
    # Registered Arrow keys and a semi-join: a nightly hard delete can name 100k ids, where
    # list_contains would compare every row with every id.
    con.register("_gone_ids", pa.table({"k": pa.array(sorted(set(record_ids)), pa.string())}))
    con.register("_gone_hashes", pa.table({"k": pa.array(sorted(set(text_hashes)), pa.string())}))
    counts = {}
    try:
        for table, column, keys in (
            ("cluster_members", "episode_id", "_gone_ids"),
            ("access_stats", "record_id", "_gone_ids"),
            ("score_cache", "candidate_id", "_gone_ids"),  # a digest's summary
            # a folded turn still contradicts what it contradicted (its digest says it): an
            # open contest keeps its evidence list for the settle card
            *([] if folded else [("contest_evidence", "episode_id", "_gone_ids")]),
            ("embedding_cache", "content_hash", "_gone_hashes"),
        ):
            before = _count(con, table)
            if before:
                con.execute(f"DELETE FROM {table} WHERE {column} IN (SELECT k FROM {keys})")
                counts[table] = before - _count(con, table)
        before = 0 if folded else _count(con, "extracted_facts")
        if before:  # tentative facts resting on a deleted episode go with it
            con.execute(
                "DELETE FROM extracted_facts WHERE fact_id IN (SELECT fact_id FROM (SELECT "
                "fact_id, unnest(CAST(evidence AS VARCHAR[])) AS e FROM extracted_facts) "
                "JOIN _gone_ids ON e = k)"
            )
            counts["extracted_facts"] = before - _count(con, "extracted_facts")
    finally:
        con.unregister("_gone_ids")
        con.unregister("_gone_hashes")
    return {k: v for k, v in counts.items() if v}


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    row = con.execute(f"SELECT count(*) FROM {table}").fetchall()
    return int(row[0][0]) if row else 0


def _scrub_audit(con: duckdb.DuckDBPyConnection, needles: list[str], tenant_id: str | None) -> int:
    """Replace the ids in audit targets/details and receipt bodies; events and counts stay."""
    changed = 0
    for table, target_col, json_col, tenant_col in (
        ("audit_log", "target", "detail", True),
        ("receipts", None, "body", False),
    ):
        tenant, tparams = (
            ("AND (tenant_id = ? OR tenant_id IS NULL)", [tenant_id])
            if tenant_id and tenant_col
            else ("", [])
        )
        for needle in sorted(set(needles)):
            quoted = json.dumps(needle)
            match = f"contains({json_col}::VARCHAR, ?)"
            params: list[Any] = [quoted]
            if target_col:
                match = f"({target_col} = ? OR {match})"
                params = [needle, quoted]
            row = con.execute(
                f"SELECT count(*) FROM {table} WHERE {match} {tenant}", [*params, *tparams]
            ).fetchone()
            if not row or not row[0]:
                continue
            changed += int(row[0])
            sets = f"{json_col} = replace({json_col}::VARCHAR, ?, ?)::JSON"
            set_params: list[Any] = [quoted, json.dumps(FORGOTTEN)]
            if target_col:
                sets = (
                    f"{target_col} = CASE WHEN {target_col} = ? THEN ? ELSE {target_col} END, "
                    + sets
                )
                set_params = [needle, FORGOTTEN, *set_params]
            con.execute(
                f"UPDATE {table} SET {sets} WHERE {match} {tenant}",
                [*set_params, *params, *tparams],
            )
    return changed


def table_columns(con: duckdb.DuckDBPyConnection) -> list[tuple[str, list[tuple[str, str]]]]:
    """Every base table of the database, with its (column, type) pairs in order: what the
    deletion's scans (and the eval's) read every text column of, whatever a migration added."""
    rows = con.execute(
        """SELECT c.table_name,
        list({'name': c.column_name, 'type': c.data_type} ORDER BY c.ordinal_position)
        FROM information_schema.columns c JOIN information_schema.tables t
        ON t.table_name = c.table_name AND t.table_schema = c.table_schema
        AND t.table_catalog = c.table_catalog
        WHERE c.table_schema = 'main' AND c.table_catalog = current_database()
        AND t.table_type = 'BASE TABLE'
        GROUP BY 1 ORDER BY 1"""
    ).fetchall()
    return [(name, [(c["name"], c["type"]) for c in cols]) for name, cols in rows]


def _text_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, list[str], bool, bool]]:
    """Every base table: (name, its VARCHAR/JSON columns, has tenant_id, has candidate_id)."""
    out = []
    for name, columns in table_columns(con):
        if name == "deletion_needles":  # what a running deletion looks for, not residue
            continue
        names = [c for c, _ in columns]
        text = [c for c, kind in columns if kind in ("VARCHAR", "JSON")]
        out.append((name, text, "tenant_id" in names, "candidate_id" in names))
    return out


def literal_pattern(values: Sequence[str]) -> str:
    """One RE2 alternation of literal strings: every character but ASCII letters and digits
    as ``\\x{HEX}`` (RE2 rejects some of Python's escapes). One pass per cell, however many."""
    return "|".join(
        "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in v)
        for v in values
    )


def values_left(meta: MetaStore, values: Sequence[str]) -> dict[str, int]:
    """Rows of any DuckDB table with a text column holding one of ``values`` anywhere in it
    (as stored or JSON-escaped): {table: rows}. For values only a forgotten subject gave
    (``stages/forget/subject_values.py``), so no tenant filter: no other row may hold one."""
    spelled = sorted({s for v in values if v for s in _spellings(v)})
    hits: dict[str, int] = {}
    if not spelled:
        return hits
    pattern = literal_pattern(spelled)
    with meta.connect() as con:
        for name, cols, _tenant, _candidate in _text_tables(con):
            if not cols:
                continue
            match = " OR ".join(f'regexp_matches("{c}"::VARCHAR, $p)' for c in cols)
            row = con.execute(
                f'SELECT count(*) FROM "{name}" WHERE {match}', {"p": pattern}
            ).fetchall()
            if row and row[0][0]:
                hits[name] = int(row[0][0])
    return hits


def find_needles(
    meta: MetaStore,
    needles: list[str],
    *,
    tenant_id: str | None,
    exclude_request: str | None = None,
    words: Sequence[str] = (),
) -> dict[str, int]:
    """Rows of ANY DuckDB table whose text columns hold a needle: {table: rows}.

    A VARCHAR/JSON value matches when it equals the needle or contains it JSON-quoted (ids
    inside JSON documents); a ``words`` entry (the subject's name) also matches where it
    stands alone in free text, quoted or not (a truncated line, a sentence). With
    ``tenant_id``, tables that have a tenant column only count that tenant's rows and rows
    of no known tenant (another tenant's subject of the same name is not this subject).
    """
    hits: dict[str, int] = {}
    wanted = sorted({n for n in needles if n})
    if not wanted:
        return hits
    patterns = sorted({word_pattern(s) for w in words if w for s in _spellings(w)})
    with meta.connect() as con:
        con.register(
            "_needles", pa.table({"needle": wanted, "quoted": [json.dumps(n) for n in wanted]})
        )
        con.register("_words", pa.table({"pattern": pa.array(patterns, pa.string())}))
        for name, cols, has_tenant, has_candidate in _text_tables(con):
            if not cols:
                continue
            match = " OR ".join(
                f'n.needle = "{c}"::VARCHAR OR contains("{c}"::VARCHAR, n.quoted)' for c in cols
            )
            word = " OR ".join(f'regexp_matches("{c}"::VARCHAR, w.pattern)' for c in cols)
            where = (
                f"(EXISTS (SELECT 1 FROM _needles n WHERE {match}) "
                f"OR EXISTS (SELECT 1 FROM _words w WHERE {word}))"
            )
            params: list[Any] = []
            if tenant_id is not None and has_tenant:
                where += " AND (tenant_id = ? OR tenant_id IS NULL)"
                params.append(tenant_id)
            elif tenant_id is not None and has_candidate and name != "candidates":
                # no tenant column: a row about another tenant's candidate is not this subject
                where += (
                    f' AND NOT EXISTS (SELECT 1 FROM candidates k WHERE k.candidate_id = "{name}"'
                    ".candidate_id AND k.tenant_id <> ?)"
                )
                params.append(tenant_id)
            if name == "deletion_requests" and exclude_request:
                where += " AND request_id <> ?"
                params.append(exclude_request)
            row = con.execute(f'SELECT count(*) FROM "{name}" WHERE {where}', params).fetchall()
            if row and row[0][0]:
                hits[name] = int(row[0][0])
        con.unregister("_needles")
        con.unregister("_words")
    return hits
