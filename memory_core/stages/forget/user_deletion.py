"""User deletion: ``memctl forget --subject S`` / ``--episode ID``, provable and with a receipt.

Order, chosen so a crash at any point converges on a rerun (the request stays pending until
its receipt is written):

1. refuse early if Lance tags would keep old versions (nothing written yet);
2. collect the subject's rows in every Lance table (every status and row version) and the
   embedding-cache keys of their texts, recomputed from the rows before they go;
3. take the subject's records out of tenant-scope derived records (digests lose their lines,
   facts/procedures/candidates their evidence) and re-check them as revocation does;
4. recompute the centroid and label of every cluster that loses members (both derive from
   content), or drop a cluster left with no stored member;
5. delete the subject's rows in every classified DuckDB table in one transaction;
6. delete the subject's Lance rows (one commit per table), and its access-log lines;
7. purge: compaction materializing deletions, index refresh, cleanup of every old version;
8. verify: every version of every Lance table, index row counts, every text column of every
   DuckDB table, and the access-log files, for the target's name and record ids, and every
   derived table for the identifying values only its episodes held (``subject_values``,
   found in step 2); then store the receipt (counts, tables, versions
   purged, duration, verification; the subject only as a hash).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import Embedder
from memory_core.stages.cluster.leader import episode_features, unit_rows
from memory_core.stages.cluster.stage import _error_code, _label
from memory_core.stages.forget.expire import access_log_dir
from memory_core.stages.forget.purge import text_hashes_of
from memory_core.stages.forget.revoke import remove_sources
from memory_core.stages.forget.subject_values import identifying_values, only_theirs, values_left
from memory_core.stores import Stores
from memory_core.stores import forgetting as fstore
from memory_core.stores.audit import receipt_id as audit_receipt_id
from memory_core.stores.audit import record_audit, store_receipt
from memory_core.stores.lance import sql_quote
from memory_core.stores.maintenance import check_tags, index_health, purge_versions, scan_versions
from memory_core.stores.residue import Needles, Orchestrator, scan_home, scrub_product_inputs
from memory_core.stores.schemas import ID_COLUMN, TABLES
from memory_core.stores.status_writes import MetaStatuses, write_status

__all__ = ["Target", "forget"]

logger = logging.getLogger(__name__)

_NEEDLE_LIMIT = 500  # ids searched inside JSON/text values; beyond this, exact values only


@dataclass(frozen=True)
class Target:
    """Whom or what to forget: a subject (optionally in one tenant) or one episode."""

    subject_id: str | None = None
    episode_id: str | None = None
    tenant_id: str | None = None

    def where(self) -> str:
        if self.subject_id is not None:
            clause = f"subject_id = {sql_quote(self.subject_id)}"
        else:
            clause = f"episode_id = {sql_quote(self.episode_id or '')}"
        if self.tenant_id is not None:
            clause += f" AND tenant_id = {sql_quote(self.tenant_id)}"
        return clause

    @property
    def kind(self) -> str:
        return "subject" if self.subject_id is not None else "episode"

    @property
    def name(self) -> str:
        return self.subject_id if self.subject_id is not None else (self.episode_id or "")


def _collect(
    stores: Stores, target: Target
) -> tuple[dict[str, list[str]], list[str], list[str], list[str]]:
    """({table: ids} of the target's rows in every version-current table, text hashes, the
    verbatim texts: needles for copies outside our rows, e.g. an orchestrator's form, and
    the identifying values of its episodes that no other episode holds)."""
    ids: dict[str, list[str]] = {}
    hashes: list[str] = []
    texts: list[str] = []
    values: set[str] = set()
    existing = set(stores.lance.table_names())
    for name in TABLES:
        if name not in existing or (target.kind == "episode" and name != "episodes"):
            continue
        cols = [ID_COLUMN[name], *(["goal", "actions", "conditions", "text", "feedback"]
                                   if name == "episodes" else ["text"])]  # fmt: skip
        rows = stores.lance.scan(name, where=target.where(), columns=cols)
        if rows.num_rows:
            ids[name] = rows.column(ID_COLUMN[name]).to_pylist()
            hashes += text_hashes_of(name, rows)
            for column in ("text", "feedback"):
                if column in rows.column_names:
                    texts += [t for t in rows.column(column).to_pylist() if t]
            if name == "episodes":
                values |= identifying_values(
                    rows.column("actions").to_pylist(), rows.column("conditions").to_pylist()
                )
    # the name itself (a ``user_id`` argument) is looked for as the name, where the request
    # that names it is rightly kept
    values = {v for v in values if v not in target.name}
    return ids, hashes, texts, only_theirs(stores, target.where(), values)


def _recompute_clusters(stores: Stores, settings: Settings, gone: list[str]) -> tuple[list, list]:
    """(updates, dropped) for clusters losing members: centroid and label from the rest."""
    clusters = fstore.clusters_of_members(stores.meta, gone)
    remaining = fstore.remaining_members(stores.meta, clusters, minus=gone)
    updates, dropped = [], []
    for cid in clusters:
        members = remaining[cid]
        rows = None
        if members:
            quoted = ", ".join(sql_quote(m) for m in members)
            rows = stores.lance.scan(
                "episodes",
                where=f"episode_id IN ({quoted})",
                columns=["episode_id", "occurred_at", "goal", "actions", "conditions", "vector"],
            ).sort_by([("occurred_at", "ascending"), ("episode_id", "ascending")])
        if rows is None or rows.num_rows == 0:
            dropped.append(cid)
            continue
        vectors = np.asarray(rows.column("vector").to_pylist(), dtype=np.float32)
        goals = rows.column("goal").to_pylist()
        features = episode_features(vectors, goals, settings.cluster.goal_weight)
        centroid = unit_rows(features.mean(axis=0, keepdims=True))[0]
        first = rows.slice(0, 1).to_pylist()[0]
        label = _label(first["goal"], first["actions"], _error_code(first["conditions"]))
        updates.append((cid, [float(x) for x in centroid], len(members), label))
    return updates, dropped


def _scrub_access_log(settings: Settings, target: Target, ids: set[str]) -> int:
    """Rewrite the access-log files (pending and folded) without the target's lines."""
    folder = access_log_dir(settings)
    removed = 0
    for path in sorted([*folder.glob("*.jsonl"), *folder.glob("folded/*.jsonl")]):
        kept, dropped = [], 0
        for line in path.read_text(encoding="utf-8").splitlines():
            if _log_line_matches(line, target, ids):
                dropped += 1
            else:
                kept.append(line)
        if dropped:
            tmp = path.with_suffix(".scrub")
            tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
            tmp.replace(path)
            removed += dropped
    return removed


def _log_line_matches(line: str, target: Target, ids: set[str]) -> bool:
    try:
        item = json.loads(line)
    except ValueError:
        return target.name in line  # unparseable: be safe
    if not isinstance(item, dict):
        return False
    if item.get("record_id") in ids:
        return True
    if target.subject_id is None or item.get("subject_id") != target.subject_id:
        return False
    return target.tenant_id is None or item.get("tenant_id") == target.tenant_id


def _verify(stores: Stores, settings: Settings, target: Target, ids: list[str],
            request_id: str | None) -> dict[str, Any]:  # fmt: skip
    """Scan every version of every table, index counts, DuckDB and access logs for residue."""
    residue: dict[str, Any] = {}
    versions: dict[str, int] = {}
    quoted = json.dumps(target.name).replace("'", "''")
    for name in TABLES:
        if name not in stores.lance.table_names():
            continue
        where = f"(({target.where()}) OR strpos(provenance, '{quoted}') > 0)"
        if target.kind == "episode" and name != "episodes":
            where = f"strpos(provenance, '{quoted}') > 0"
        if target.tenant_id is not None:
            where += f" AND tenant_id = {sql_quote(target.tenant_id)}"
        checked, hits = scan_versions(stores.lance, name, where)
        versions[name] = checked
        if hits is not None:
            residue[f"lance.{name}"] = hits.num_rows
        stale = {k: v for k, v in index_health(stores.lance, name).items() if v > 0}
        if stale:
            residue[f"index.{name}"] = stale
    needles = [target.name, *ids[:_NEEDLE_LIMIT]]
    words = [target.subject_id] if target.subject_id is not None else []
    for table, count in fstore.find_needles(
        stores.meta, needles, tenant_id=target.tenant_id, exclude_request=request_id, words=words
    ).items():
        residue[f"duckdb.{table}"] = count
    left = _scrub_access_log(settings, target, set(ids))  # a second pass finds nothing
    if left:
        residue["access_log"] = left
    return {"verified": not residue, "versions_checked": versions, "residue": residue}


def forget(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    target: Target,
    *,
    embedder: Embedder | None = None,
    request_id: str | None = None,
    orchestrator: Orchestrator | None = None,
) -> dict[str, Any]:
    """Delete the target everywhere, purge old versions, verify, and return the receipt.

    ``orchestrator`` (Prefect, from ``flows/privacy.py``) removes its own copies that hold
    the target; the receipt lists them by kind and id."""
    # One DuckDB open for every step up to the stored receipt (a dozen opens cost ~1.3 s, more
    # than the Lance purge of a regrouped table); the byte scan's file rewrite needs it closed.
    with stores.meta.session():
        receipt, needles = _forget_rows(
            stores, settings, ctx, target, embedder=embedder, request_id=request_id,
            orchestrator=orchestrator,
        )  # fmt: skip
    _verify_bytes(stores, settings, receipt, needles, orchestrator, request_id)
    logger.info(
        "forget %s run=%s rows=%d verified=%s in %.2fs", target.kind, ctx.run_id,
        sum(receipt["lance_rows_deleted"].values()), receipt["verification"]["verified"],
        receipt["duration_s"],
    )  # fmt: skip
    return receipt


def _forget_rows(
    stores: Stores,
    settings: Settings,
    ctx: RunContext,
    target: Target,
    *,
    embedder: Embedder | None,
    request_id: str | None,
    orchestrator: Orchestrator | None,
) -> tuple[dict[str, Any], Needles]:
    """Every step of ``forget`` up to the stored receipt; (receipt, needles of the scan)."""
    t0 = time.perf_counter()
    tables = [t for t in TABLES if t in stores.lance.table_names()]
    check_tags(stores.lance, tables, drop=settings.forget.drop_tags)
    with stores.meta.connect() as con:
        unclassified = fstore.unclassified_tables(con)
    ids_by_table, hashes, texts, values = _collect(stores, target)
    if request_id is not None:  # a rerun after a crash checks what the first run found
        kept = fstore.keep_needles(
            stores.meta, request_id, {"text": texts, "hash": hashes, "value": values}
        )
        texts, hashes, values = kept["text"], kept["hash"], kept["value"]
    record_ids = sorted({i for ids in ids_by_table.values() for i in ids})
    if target.subject_id is not None:  # sources no longer in Lance (compacted) still count
        record_ids = sorted(
            set(record_ids)
            | set(fstore.subject_sources(stores.meta, target.subject_id, target.tenant_id))
        )
    marks = {"collect": time.perf_counter()}
    reason = f"user deletion ({target.kind})"
    derived = remove_sources(
        stores, settings, ctx, set(record_ids), reason=reason, embedder=embedder,
        delete_subject=target.subject_id,
    )  # fmt: skip
    marks["derived"] = time.perf_counter()
    episodes = ids_by_table.get("episodes", [])
    updates, dropped = _recompute_clusters(stores, settings, episodes)
    candidates = (
        fstore.subject_candidates(stores.meta, target.subject_id, target.tenant_id)
        if target.subject_id is not None
        else []
    )
    with stores.meta.transaction() as con:
        control = fstore.purge_subject_rows(
            con, subject_id=target.subject_id, tenant_id=target.tenant_id,
            record_ids=record_ids, text_hashes=hashes, candidate_ids=candidates,
        )  # fmt: skip
        fstore.save_cluster_changes(con, updates, dropped, now=ctx.now)
        quoted = fstore.scrub_quotes(con, Needles.of([], [], texts).texts)
        if quoted:
            control["typed text quoting it"] = quoted
    marks["control_plane"] = time.perf_counter()
    lance_deleted: dict[str, int] = {}
    for name, ids in ids_by_table.items():
        stores.lance.delete(name, target.where())
        lance_deleted[name] = len(ids)
    log_lines = _scrub_access_log(settings, target, set(record_ids))
    inputs = (
        scrub_product_inputs(settings.home, target.subject_id, target.tenant_id, record_ids)
        if target.subject_id is not None
        else {}
    )
    marks["delete"] = time.perf_counter()
    purged = [
        purge_versions(stores.lance, name, drop_tags=settings.forget.drop_tags,
                       delete_unverified=settings.forget.delete_unverified)
        for name in tables
    ]  # fmt: skip
    marks["purge"] = time.perf_counter()
    # the values only the target gave go with its ids: the orchestrator's copies and the
    # byte scan match those of 12+ bytes anywhere (``stores/residue.py``), like an id
    needles = Needles.of([target.name], [*record_ids, *candidates, *values], texts)
    removed = orchestrator.purge(needles) if orchestrator is not None else []
    marks["orchestrator"] = time.perf_counter()
    verification = _verify(stores, settings, target, [*record_ids, *candidates], request_id)
    for table, count in fstore.quotes_left(stores.meta, needles.texts).items():
        verification["residue"][f"duckdb.{table}.quotes"] = count
        verification["verified"] = False
    # the values only the target gave (never listed in the receipt: they are its data)
    verification["values_checked"] = len(values)
    verification["texts_checked"] = len(set(texts))
    for where, count in values_left(stores, values).items():
        verification["residue"][f"{where}.values"] = count
        verification["verified"] = False
    marks["verify"] = time.perf_counter()
    names, stamps = list(marks), [t0, *marks.values()]
    seconds = {n: round(stamps[i + 1] - stamps[i], 3) for i, n in enumerate(names)}
    # one receipt per request (a rerun after a crash stores it once), or per target and clock
    action = request_id or [target.tenant_id, target.name, ctx.now.isoformat()]
    receipt_id = audit_receipt_id(f"forget_{target.kind}", action)
    target_hash = fstore.subject_hash(target.tenant_id, target.name)
    receipt = {
        "receipt_id": receipt_id,
        "kind": f"forget_{target.kind}",
        "target_hash": target_hash,
        "tenant_id": target.tenant_id,
        "request_id": request_id,
        "at": ctx.now.isoformat(),
        "run_id": ctx.run_id,
        "lance_rows_deleted": lance_deleted,
        "derived": derived.counts(),
        "derived_changed": [{k: v for k, v in c.items() if k != "reason"} for c in derived.changes],
        "control_plane_rows": control,
        "clusters": {"recomputed": len(updates), "dropped": len(dropped)},
        "access_log_lines": log_lines,
        "product_inputs_scrubbed": inputs,
        "orchestrator_removed": removed,
        "versions_purged": {p.table: p.versions_purged for p in purged},
        "fragments_rewritten": {p.table: p.fragments_rewritten for p in purged},
        "tags_dropped": {p.table: p.tags_dropped for p in purged if p.tags_dropped},
        "unverified_files": "deleted" if settings.forget.delete_unverified else "kept (<7 days)",
        "unclassified_tables": unclassified,
        "verification": verification,
        "seconds": seconds,
        "duration_s": round(time.perf_counter() - t0, 3),
    }
    with stores.meta.transaction() as con:
        store_receipt(con, receipt_id=receipt_id, kind=receipt["kind"], at=ctx.now,
                      run_id=ctx.run_id, body=receipt)  # fmt: skip
        record_audit(
            con, at=ctx.now, action=receipt["kind"], run_id=ctx.run_id, actor=ctx.actor,
            target=target_hash, tenant_id=target.tenant_id,
            counts={"lance_rows": sum(lance_deleted.values()), **control},
            detail={"receipt_id": receipt_id, "verified": verification["verified"]},
        )  # fmt: skip
        if request_id is not None:
            fstore.finish_request(
                con, request_id, status="done" if verification["verified"] else "unverified",
                done_at=ctx.now, receipt_id=receipt_id, target=target_hash,
            )  # fmt: skip
    return receipt, needles


def _verify_bytes(stores: Stores, settings: Settings, receipt: dict[str, Any], needles: Needles,
                  orchestrator: Orchestrator | None, request_id: str | None) -> None:  # fmt: skip
    """After the receipt is stored: rewrite the DuckDB file (no freed block keeps a deleted
    row, nor the request's clear target), then scan every byte under the home and ask the
    orchestrator; residue turns the stored receipt (and its request) unverified."""
    t0 = time.perf_counter()
    receipt["meta_file_rewrite_s"] = round(stores.meta.rewrite(), 3)
    names = needles.names
    verification = receipt["verification"]
    verification["home_scan"] = "every file: the name, the record ids and the values"
    if _name_elsewhere(stores, receipt["tenant_id"], names):
        names = ()  # another tenant's subject of this name is still rightly stored
        verification["home_scan"] = (
            "every file: record ids and values (the name is another tenant's too)"
        )
    files = scan_home(
        settings.home, Needles.of(names, needles.ids),
        kept_ids=lambda ids: _kept_ids_containing(stores, ids),
    )  # fmt: skip
    left = orchestrator.residue(needles) if orchestrator is not None else {}
    if files:
        verification["residue"]["home_files"] = files
    if left:
        verification["residue"]["orchestrator"] = left
    receipt["seconds"]["bytes"] = round(time.perf_counter() - t0, 3)
    if not (files or left):
        return
    verification["verified"] = False
    with stores.meta.transaction() as con:
        store_receipt(con, receipt_id=receipt["receipt_id"], kind=receipt["kind"],
                      at=datetime.fromisoformat(receipt["at"]), run_id=receipt["run_id"],
                      body=receipt, replace=True)  # fmt: skip
        con.execute(
            "UPDATE audit_log SET detail = json_object('receipt_id', ?, 'verified', false) "
            "WHERE action = ? AND json_extract_string(detail, '$.receipt_id') = ?",
            [receipt["receipt_id"], receipt["kind"], receipt["receipt_id"]],
        )
        if request_id is not None:
            unverified = MetaStatuses(con, {request_id: "unverified"}, table="deletion_requests")
            write_status(None, unverified, at=datetime.fromisoformat(receipt["at"]))


def _kept_ids_containing(stores: Stores, ids: Sequence[str]) -> list[str]:
    """Record ids still stored that contain a forgotten one (``conv-43:D2:10`` holds
    ``conv-43:D2:1``): the byte scan must not read the kept record as the forgotten one's."""
    wanted = [i for i in ids if i]
    if not wanted:
        return []
    kept: list[str] = []
    existing = set(stores.lance.table_names())
    for name in (t for t in TABLES if t in existing):
        column = pl.from_arrow(stores.lance.scan(name, columns=[ID_COLUMN[name]]).column(0))
        kept.extend(column.filter(column.str.contains_any(wanted)).drop_nulls().to_list())
    return kept


def _name_elsewhere(stores: Stores, tenant_id: str | None, names: tuple[str, ...]) -> bool:
    """A tenant-scoped deletion whose subject id also names a subject of another tenant."""
    if tenant_id is None or not names:
        return False
    quoted = ", ".join(sql_quote(n) for n in names)
    where = f"subject_id IN ({quoted}) AND tenant_id <> {sql_quote(tenant_id)}"
    existing = set(stores.lance.table_names())
    return any(stores.lance.count(t, where) for t in TABLES if t in existing)
