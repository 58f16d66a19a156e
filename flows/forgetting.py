"""Forgetting flows: the nightly ``forgetting`` pass and the 15-minute ``deletion-requests``.

Thin orchestration over ``memory_core.stages.forget``: tasks take plain values (settings as a
dict, the clock) and open the stores themselves. Deletions run one at a time (one task per
request, sequentially): each purges old Lance versions, which must not race another purge.
Serve them with ``flow.serve(..., cron="*/15 * * * *", global_limit=1)`` for deletions and a
nightly cron for ``forgetting`` (after ``nightly-consolidation``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.ephemeral import no_heartbeats_to_an_ephemeral_server
from flows.privacy import prefect_store
from flows.retry import pipeline_task
from flows.runners import task_runner
from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.crash import crash_point
from memory_core.lease import hold as hold_lease
from memory_core.report import write_report
from memory_core.stages import forget as stage
from memory_core.stages.forget.maintain import maintain_tables
from memory_core.stages.forget.rewrite import (
    CompactionJob,
    compact_changed_tables,
    execute_compaction,
)
from memory_core.stores import Stores, open_stores

__all__ = [
    "DELETION_CRON",
    "deletion_requests",
    "forgetting",
    "run_deletion_requests",
    "run_forgetting_flow",
]

DELETION_CRON = "*/15 * * * *"


def _open(settings_data: dict[str, Any]) -> tuple[Settings, Stores]:
    settings = Settings.model_validate(settings_data)
    return settings, open_stores(settings)


@pipeline_task("forgetting-pass", retry_delay_s=5)
def forgetting_task(*, settings_data: dict[str, Any], now_iso: str, run_id: str,
                    maintain: bool = True) -> dict[str, Any]:  # fmt: skip
    """Access-log fold, compaction, expiry, hard delete (and maintenance unless the flow does)."""
    settings, stores = _open(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    return stage.run_forgetting(stores, settings, ctx, maintain=maintain)


@pipeline_task("lance-compaction-rewrite")
def rewrite_task(*, job: CompactionJob, storage_options: dict[str, str]) -> str:
    """One planned Lance compaction task, on whichever worker the runner picks."""
    return execute_compaction(job, storage_options)


@pipeline_task("lance-maintenance")
def maintenance_task(*, settings_data: dict[str, Any], tables: list[str]) -> list[dict[str, Any]]:
    """Index refresh and version pruning after the workers' compaction was committed."""
    settings, stores = _open(settings_data)
    return maintain_tables(stores, settings, tables)


def _compact_on_workers(settings_data: dict[str, Any], receipt: dict[str, Any]) -> None:
    """The library's compaction step (stages/forget/rewrite.py), its rewrites as tasks on the
    runner's workers and its maintenance as one task."""
    settings, stores = _open(settings_data)

    def on_workers(jobs: list[CompactionJob]) -> list[str]:
        options = settings.stores.storage_options
        futures = [rewrite_task.submit(job=job, storage_options=options) for job in jobs]
        return [f.result() for f in futures]

    compact_changed_tables(
        stores,
        settings,
        receipt,
        rewrite=on_workers,
        maintain=lambda tables: maintenance_task(settings_data=settings_data, tables=tables),
    )


@pipeline_task("forget-request", retry_delay_s=5)
def deletion_task(*, settings_data: dict[str, Any], request_id: str, now_iso: str,
                  run_id: str) -> dict[str, Any]:  # fmt: skip
    """Carry out one queued user deletion (a rerun of a done request does nothing)."""
    settings, stores = _open(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    return stage.carry_out_request(
        stores, settings, ctx, request_id, orchestrator=prefect_store(settings.home)
    )


@flow(name="forgetting", log_prints=False)
def forgetting(*, settings_data: dict[str, Any], now_iso: str) -> dict[str, Any]:
    """The nightly forgetting pass; publishes its receipt as an artifact."""
    ctx = RunContext(now=datetime.fromisoformat(now_iso))
    settings, stores = _open(settings_data)
    # after consolidation, never beside it: wait (bounded) for the home's pipeline lease
    with hold_lease(
        stores.meta,
        holder=ctx.run_id,
        flow="forgetting",
        ttl_s=settings.lease.ttl_s,
        wait_s=settings.lease.forgetting_wait_s,
    ):
        crash_point("forgetting.leased")
        receipt = forgetting_task(
            settings_data=settings_data, now_iso=now_iso, run_id=ctx.run_id, maintain=False
        )
        crash_point("forgetting.pass_done")
        _compact_on_workers(settings_data, receipt)
    rows = [
        {
            "table": t,
            "expired": receipt["expired"].get(t, 0),
            "deleted": receipt["deleted"].get(t, 0),
        }
        for t in sorted(set(receipt["expired"]) | set(receipt["deleted"]))
    ]
    create_table_artifact(key="forgetting-counts", table=rows, description="Expired and deleted")
    create_markdown_artifact(
        key="forgetting-summary",
        markdown=(
            f"# Forgetting {receipt['run_id']}\n\n- clock: {receipt['at']}\n"
            f"- digests: {receipt['compaction']['digests']} "
            f"({receipt['compaction']['episodes_folded']} episodes folded)\n"
            f"- access log: {receipt['access_log']}\n- receipt: {receipt['receipt_id']}\n"
        ),
    )
    get_run_logger().info("forgetting %s: %s", receipt["run_id"], rows)
    _report(settings_data)
    return receipt


def _report(settings_data: dict[str, Any]) -> None:
    """Refresh <home>/reports/index.html with this pass (never fails the flow)."""
    try:
        settings, stores = _open(settings_data)
        write_report(stores, settings.home)
    except Exception as exc:  # the pass is committed; a report must not fail it
        get_run_logger().warning("HTML report not written: %s", exc)


@flow(name="deletion-requests", log_prints=False)
def deletion_requests(*, settings_data: dict[str, Any], now_iso: str,
                      limit: int = 100) -> list[dict[str, Any]]:  # fmt: skip
    """Carry out queued user deletions, oldest first; one receipt each (no content)."""
    settings, stores = _open(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso))

    def carry_out(request_id: str) -> dict[str, Any]:
        return deletion_task(settings_data=settings_data, request_id=request_id,
                             now_iso=now_iso, run_id=ctx.run_id)  # fmt: skip

    # the library's loop (stages/forget/stage.py), each request one task
    receipts = stage.process_deletion_requests(
        stores, settings, ctx, limit=limit, carry_out=carry_out
    )
    done = [r for r in receipts if not r.get("skipped")]
    if done:
        create_table_artifact(
            key="deletion-receipts",
            table=[
                {
                    "receipt_id": r["receipt_id"],
                    "kind": r["kind"],
                    "target_hash": r["target_hash"][:23],
                    "verified": r["verification"]["verified"],
                    "rows": sum(r["lance_rows_deleted"].values()),
                    "seconds": r["duration_s"],
                }
                for r in done
            ],
            description="User deletions carried out (targets by hash only)",
        )
    get_run_logger().info("deletion-requests: %d done", len(done))
    return receipts


def run_forgetting_flow(settings: Settings, *, now: datetime) -> dict[str, Any]:
    runner = task_runner(settings.runner)
    with no_heartbeats_to_an_ephemeral_server():
        return forgetting.with_options(task_runner=runner)(
            settings_data=settings.model_dump(mode="json"), now_iso=now.isoformat()
        )


def run_deletion_requests(settings: Settings, *, now: datetime) -> list[dict[str, Any]]:
    with no_heartbeats_to_an_ephemeral_server():
        return deletion_requests(
            settings_data=settings.model_dump(mode="json"), now_iso=now.isoformat()
        )
