"""Lance compaction planned centrally, rewritten on workers, committed once.

Why: compaction is the expensive part of forgetting at scale (rewriting every fragment that
holds a deleted row; ~8 s per 1M x 384-d rows here). pylance splits it in three:
``Compaction.plan`` (cheap, reads the manifest) gives independent tasks of disjoint fragment
groups; ``CompactionTask.execute`` rewrites one group and returns a ``RewriteResult`` (new
data files written, nothing committed); ``Compaction.commit`` makes all of them one new
version (and remaps the indices). So the flow plans, a task runner executes the tasks on any
worker that reaches the store (threads, Dask or Ray processes), and the flow commits: readers
see the table before or after compaction, never half of it (invariant 9). A task that fails or
is lost leaves only unreferenced files, which the next version cleanup removes; committing the
results that did finish is allowed (pylance).

Jobs and results cross process boundaries as JSON strings (pylance's own serialisation), so
they pickle for any runner. With ``materialize_deletions_threshold=0.0`` every fragment with a
deleted row is rewritten, which is what makes forgetting real (``stores/maintenance.py``);
after a commit here, ``purge_versions``' own ``compact_files`` finds nothing left to do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lance
from lance.optimize import Compaction, CompactionTask, RewriteResult

from memory_core.config import Settings
from memory_core.crash import crash_point
from memory_core.stages.forget.maintain import maintain_tables
from memory_core.stores import Stores
from memory_core.stores.lance import LanceStore
from memory_core.stores.layout import compaction_options
from memory_core.stores.maintenance import check_tags
from memory_core.stores.meta import MetaStore

__all__ = [
    "COMPACTION_OPTIONS",
    "CompactionJob",
    "commit_compaction",
    "compact_changed_tables",
    "execute_compaction",
    "plan_compaction",
    "record_maintenance",
]

logger = logging.getLogger(__name__)

COMPACTION_OPTIONS: dict[str, Any] = {"materialize_deletions_threshold": 0.0}


@dataclass(frozen=True)
class CompactionJob:
    """One rewrite task of one table: plain values, safe to ship to any worker."""

    table: str
    uri: str
    read_version: int
    task_json: str


def _dataset(store: LanceStore, name: str) -> lance.LanceDataset:
    table = store.table(name)
    table.checkout_latest()
    return table.to_lance()


def plan_compaction(
    store: LanceStore, names: list[str], *, options: dict[str, Any] | None = None
) -> list[CompactionJob]:
    """Tasks for every table in ``names`` that has fragments worth rewriting."""
    opts = {**COMPACTION_OPTIONS, **(options or {})}
    existing = set(store.table_names())
    jobs: list[CompactionJob] = []
    for name in names:
        if name not in existing:
            continue
        ds = _dataset(store, name)
        plan = Compaction.plan(ds, compaction_options(ds, opts))
        jobs.extend(
            CompactionJob(name, ds.uri, int(plan.read_version), task.json()) for task in plan.tasks
        )
    return jobs


def execute_compaction(job: CompactionJob, storage_options: dict[str, str] | None = None) -> str:
    """Rewrite one fragment group (on a worker); the result as JSON, nothing committed."""
    ds = lance.dataset(job.uri, version=job.read_version, storage_options=storage_options or None)
    result = CompactionTask.from_json(job.task_json).execute(ds)
    return result.json()


def commit_compaction(
    store: LanceStore,
    jobs: list[CompactionJob],
    results: list[str],
    *,
    options: dict[str, Any] | None = None,
) -> dict[str, dict[str, int]]:
    """One commit per table from the workers' results; metrics per table."""
    opts = {**COMPACTION_OPTIONS, **(options or {})}
    by_table: dict[str, list[RewriteResult]] = {}
    for job, result in zip(jobs, results, strict=True):
        by_table.setdefault(job.table, []).append(RewriteResult.from_json(result))
    out: dict[str, dict[str, int]] = {}
    for name, rewrites in sorted(by_table.items()):
        ds = lance.dataset(
            _uri(jobs, name),
            version=rewrites[0].read_version,
            storage_options=store.storage_options or None,
        )
        metrics = Compaction.commit(ds, rewrites, compaction_options(ds, opts))
        out[name] = {
            "tasks": len(rewrites),
            "fragments_removed": int(metrics.fragments_removed),
            "fragments_added": int(metrics.fragments_added),
        }
        store.table(name).checkout_latest()
        logger.info("compacted %s on workers: %s", name, out[name])
    return out


def _uri(jobs: list[CompactionJob], name: str) -> str:
    return next(job.uri for job in jobs if job.table == name)


def record_maintenance(meta: MetaStore, receipt: dict[str, Any]) -> None:
    """Store a forgetting receipt again once the flow's compaction and maintenance are done.

    The forgetting pass stores its receipt before the Lance maintenance that the flow runs on
    workers; this completes the stored body (same id) so it says what maintenance did.
    """
    with meta.transaction() as con:
        con.execute(
            "UPDATE receipts SET body = ? WHERE receipt_id = ?",
            [json.dumps(receipt, sort_keys=True, default=str), receipt["receipt_id"]],
        )


def compact_changed_tables(
    stores: Stores,
    settings: Settings,
    receipt: dict[str, Any],
    *,
    rewrite: Callable[[list[CompactionJob]], list[str]] | None = None,
    maintain: Callable[[list[str]], list[dict[str, Any]]] | None = None,
) -> None:
    """After a forgetting pass run with ``maintain=False``: plan the compaction of the tables
    it changed, rewrite, commit once per table, then maintain; complete the stored receipt.

    ``rewrite(jobs)`` returns each job's result in order (default: here, one after another;
    the ``forgetting`` flow maps the jobs over its task runner's workers). ``maintain(tables)``
    defaults to :func:`maintain_tables` (the flow runs it as a task)."""
    tables = receipt.get("changed_tables", [])
    if not tables:
        return
    check_tags(stores.lance, tables, drop=settings.forget.drop_tags)
    jobs = plan_compaction(stores.lance, tables)
    options = settings.stores.storage_options
    results = rewrite(jobs) if rewrite else [execute_compaction(j, options) for j in jobs]
    receipt["lance_compaction"] = commit_compaction(stores.lance, jobs, results)
    crash_point("forgetting.lance_compacted")
    done = maintain(tables) if maintain else maintain_tables(stores, settings, tables)
    receipt["maintenance"] = done
    record_maintenance(stores.meta, receipt)
