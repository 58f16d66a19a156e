"""Label-free measurements every data set gets: write quality of what was promoted, revocation
propagation and deletion completeness, each computed from the stores after the fact.

Why label-free: these properties (provenance, authority, scope, completeness of forgetting)
are the pipeline's invariants, so they can be checked on any data, including a user's own
traces given with ``--path``. Dataset-specific gold (the demo's truth, tau-bench intents,
LoCoMo evidence) adds precision and recall on top, in the dataset modules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from memory_core.context import RunContext
from memory_core.eval import metrics
from memory_core.eval.harness import EVAL_REVIEWER, EvalHome
from memory_core.eval.retrieval import Query, open_reader, run_queries
from memory_core.eval.scans import scan_for_needles, subject_residue
from memory_core.stages.forget.subject_values import identifying_values
from memory_core.stages.promote.supersede import fact_key, procedure_key

__all__ = [
    "cost_report",
    "deletion_probe",
    "episode_sources",
    "revocation_probe",
    "sensitive_writes",
    "write_quality",
]

DERIVED = ("facts", "procedures")


def _provenance(row: dict[str, Any]) -> list[dict[str, Any]]:
    value = row.get("provenance")
    entries = json.loads(value) if isinstance(value, str) else value
    return [e for e in entries or [] if isinstance(e, dict)]


def episode_sources(row: dict[str, Any]) -> list[str]:
    return [
        str(e["source_id"])
        for e in _provenance(row)
        if e.get("source_kind", "episode") == "episode" and e.get("source_id")
    ]


def _current(row: dict[str, Any]) -> bool:
    return row.get("status") == "active" and row.get("recorded_to") is None


def write_quality(home: EvalHome) -> dict[str, Any]:
    """Unsupported, wrong-type and provenance figures over every promoted row, duplicates
    among current rows, and what the commits reported (conflicts held, supersessions).

    * unsupported: a row citing fewer distinct stored episodes than its policy needs
      (procedures and tenant-scope facts: ``policy.min_support``; a subject's fact: one);
    * wrong type: a fact with ``user_statement`` authority resting on an episode that is not
      the user's own statement, or a procedure not ``human_approved`` (invariant 5);
    * provenance complete: ``metrics.provenance_complete`` against the stored episodes.
    """
    episodes = home.rows("episodes")
    known = {e["episode_id"]: e["content_hash"] for e in episodes}
    role = {e["episode_id"]: e["source_role"] for e in episodes}
    min_support = home.settings.policy.min_support
    rows = [(t, r) for t in DERIVED for r in home.rows(t) if r.get("approver")]
    unsupported = wrong_type = complete = 0
    for table, row in rows:
        sources = {s for s in episode_sources(row) if s in known}
        need = 1 if table == "facts" and row.get("subject_id") else min_support
        unsupported += len(sources) < need
        if table == "facts" and row.get("authority") == "user_statement":
            wrong_type += any(role.get(s) != "user" for s in sources)
        elif table == "procedures":
            wrong_type += row.get("authority") != "human_approved"
        complete += metrics.provenance_complete(row, known)
    current_keys = [
        ("facts", *fact_key(r)) if t == "facts" else ("procedures", *procedure_key(r))
        for t, r in rows
        if _current(r)
    ]
    return {
        "promoted_rows": len(rows),
        "promoted_by_table": {t: sum(1 for tt, _ in rows if tt == t) for t in DERIVED},
        "unsupported_memory_rate": metrics.rate(unsupported, len(rows)),
        "wrong_type_rate": metrics.rate(wrong_type, len(rows)),
        "provenance_completeness": metrics.rate(complete, len(rows)),
        "duplicate_current_rows": metrics.duplicate_rows(current_keys),
        "conflicts_held": home.commits.get("conflicts", 0),
        "superseded_on_commit": home.commits.get("superseded", 0),
        "refused_on_commit": home.commits.get("refused", 0),
    }


def sensitive_writes(home: EvalHome, needles: Iterable[str]) -> dict[str, Any]:
    """Planted secret values found anywhere stored (must be 0), and where."""
    wanted = sorted(set(needles))
    scan = scan_for_needles(home.stores, wanted)
    return {
        "planted": len(wanted),
        "sensitive_false_writes": scan.total,
        "where": scan.hits,
        "lance_versions_scanned": scan.versions_scanned,
        "duckdb_tables_scanned": scan.duckdb_tables_scanned,
    }


def revocation_probe(
    home: EvalHome, *, now: datetime, sample: int = 1, episodes: int = 3
) -> dict[str, Any]:
    """Revoke every episode source of a few promoted records (per table, the ``sample``
    current rows with the fewest sources, ties by id: each revocation walks lineage, so this
    keeps the probe cheap) and a few more episodes (the first ``episodes`` by id); then
    check that the records, and anything else left with no unrevoked source, are revoked, and
    that recall, asked for each revoked episode's own text, never serves a revoked record."""
    from memory_core.stages.forget import revoke_source

    picked: list[tuple[str, str, list[str]]] = []
    for table in DERIVED:
        id_col = "fact_id" if table == "facts" else "procedure_id"
        current = sorted(
            (r for r in home.rows(table) if _current(r) and episode_sources(r)),
            key=lambda r: (len(set(episode_sources(r))), r[id_col]),
        )
        picked += [(table, r[id_col], episode_sources(r)) for r in current[:sample]]
    rows = {e["episode_id"]: e for e in home.rows("episodes") if _current(e)}
    plain = sorted(rows)[:episodes]
    revoked: list[str] = []
    ctx = RunContext(now=now, actor=EVAL_REVIEWER)
    for source in [s for _, _, sources in picked for s in sources] + plain:
        if source not in revoked:
            revoke_source(home.stores, home.settings, ctx, source,
                          reason="eval: source found wrong", embedder=home.embedder)  # fmt: skip
            revoked.append(source)
    status: dict[str, set[str]] = {}
    orphans = 0
    for table in DERIVED:
        id_col = "fact_id" if table == "facts" else "procedure_id"
        for row in home.rows(table):
            if _current(row):
                status.setdefault(row[id_col], set()).add("current")
                srcs = episode_sources(row)
                orphans += bool(srcs) and all(s in revoked for s in srcs)
            status.setdefault(row[id_col], set()).add(str(row.get("status")))
    propagated = sum(
        "revoked" in status.get(rid, set()) and "current" not in status.get(rid, set())
        for _, rid, _ in picked
    )
    gone = {*revoked, *(rid for _, rid, _ in picked)}
    queries = [
        Query(
            text=rows[eid].get("text") or rows[eid].get("goal") or eid,
            tenant_id=rows[eid]["tenant_id"], subjects=(rows[eid]["subject_id"],),
            relevant=frozenset(), kind="revoked", forbidden=frozenset(gone),
        )
        for eid in revoked
        if eid in rows
    ]  # fmt: skip
    with open_reader(home.settings.lance_uri, home.embedder, home.settings.recall) as memory:
        served = run_queries(memory, queries, now=now, k=home.settings.recall.default_k,
                             budget_tokens=home.settings.recall.budget_tokens)  # fmt: skip
    return {
        "records_probed": len(picked),
        "sources_revoked": len(revoked),
        "revoked_source_propagation": metrics.rate(propagated, len(picked)),
        "current_rows_citing_only_revoked_sources": orphans,
        "revoked_recall_probes": served.forbidden_asked,
        "revoked_served": served.forbidden_served,
        "probed_ids": [rid for _, rid, _ in picked],
    }


def deletion_probe(home: EvalHome, *, now: datetime, tenant_id: str, subject_id: str) -> dict:
    """Forget one subject in one tenant, then scan every table, version and DuckDB table for
    anything of theirs (must be 0); the same subject id in other tenants must stay."""
    from memory_core.stages.forget import forget_subject

    mine = [
        e for e in home.rows("episodes")
        if e["subject_id"] == subject_id and e["tenant_id"] == tenant_id
    ]  # fmt: skip
    elsewhere_before = sum(
        1
        for t in ("episodes", *DERIVED)
        for r in home.rows(t)
        if r.get("subject_id") == subject_id and r["tenant_id"] != tenant_id
    )
    receipt = forget_subject(
        home.stores, home.settings, RunContext(now=now, actor=EVAL_REVIEWER), subject_id,
        tenant_id=tenant_id, embedder=home.embedder,
    )  # fmt: skip
    # A text that someone else's text also contains ("I prefer VS Code as my editor.") is
    # not theirs to find.
    mine_ids = {e["episode_id"] for e in mine}
    theirs = [e for e in home.rows("episodes") if e["episode_id"] not in mine_ids]
    others = "\x1f".join(e.get("text") or "" for e in theirs)
    # the same for a value in their tool calls or conditions: anywhere in another's episode
    said_by_others = "\x1f".join(
        "\x1f".join([e.get("goal") or "", *(e.get("actions") or []), e.get("conditions") or "",
                     e.get("text") or "", e.get("feedback") or ""])
        for e in theirs
    )  # fmt: skip
    values = identifying_values(
        [e.get("actions") for e in mine], [e.get("conditions") for e in mine]
    )
    values = {v for v in values if v not in said_by_others and v not in subject_id}
    scan = subject_residue(
        home.stores, tenant_id=tenant_id, subject_id=subject_id,
        episode_ids=[e["episode_id"] for e in mine],
        texts=[t for e in mine if (t := e.get("text") or "") and t not in others],
        values=sorted(values),
    )  # fmt: skip
    elsewhere_after = sum(
        1
        for t in ("episodes", *DERIVED)
        for r in home.rows(t)
        if r.get("subject_id") == subject_id and r["tenant_id"] != tenant_id
    )
    return {
        "subject_episodes": len(mine),
        "deletion_residue": scan.total,
        # the values above (never listed: they are the subject's data), and how many the
        # pipeline's own receipt looked for
        "subject_values_checked": len(values),
        "pipeline_values_checked": receipt.get("verification", {}).get("values_checked", 0),
        "residue_where": scan.hits,
        "lance_versions_scanned": scan.versions_scanned,
        "duckdb_tables_scanned": scan.duckdb_tables_scanned,
        "pipeline_self_verified": bool(receipt.get("verification", {}).get("verified")),
        # where the pipeline's own check saw residue, so a "no" above says what it saw
        "pipeline_residue_where": receipt.get("verification", {}).get("residue") or {},
        "same_subject_other_tenants_rows": {"before": elsewhere_before, "after": elsewhere_after},
    }


def cost_report(home: EvalHome, episodes: int) -> dict[str, Any]:
    """What scoring would have cost with Claude (dry run), per data set and per 1,000 episodes."""
    out: dict[str, Any] = dict(home.cost)
    out["requests_per_1000_episodes"] = round(1000 * out.get("requests", 0) / max(episodes, 1), 2)
    out["scorer_used"] = sorted(set(home.score_modes))
    out["note"] = "dry run: requests the scorer would send Claude; no API call was made"
    return out
