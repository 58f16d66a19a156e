"""The nightly consolidation flow: thin orchestration over memory_core stages.

One task per stage; consolidation is mapped over batches of scope partitions (tenant,
namespace), a few per runner worker. Tasks take only plain values (settings as a dict,
partition keys, the clock) and open the stores themselves, so the same flow runs on threads,
Dask or Ray. The stage ledger makes a rerun skip what is done
(memory_core/stages/stage_ledger.py: the protocol is library code; tasks only call it).
"""

from __future__ import annotations

from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.task_runners import ThreadPoolTaskRunner

from flows.retry import pipeline_task
from flows.runners import describe as describe_runner
from flows.worker_pool import processes_for, warm_workers
from flows.worker_pool import release as release_workers
from flows.worker_pool import take as take_workers
from memory_core.config import Settings
from memory_core.context import Partition, RunContext
from memory_core.crash import crash_point
from memory_core.gc_pause import gc_frozen
from memory_core.lease import hold as hold_lease
from memory_core.report import collect_report, rows_by_status, write_report
from memory_core.stages.consolidate import (
    STAGE,
    PlannedPartition,
    consolidation_plan,
    index_episodes,
)
from memory_core.stages.consolidate import consolidate_partition as consolidate
from memory_core.stages.shared_state import read_shared_state
from memory_core.stages.stage_ledger import LedgeredWork
from memory_core.stores import Stores, open_stores
from memory_core.stores.candidates import count_by_status, run_candidate_rows
from memory_core.stores.ledger import finish_run, start_run

__all__ = ["nightly_consolidation", "run_nightly"]

# Partition batches per runner worker: enough to balance uneven partitions over the workers,
# few enough that the per-task cost (a Prefect task run, opening the stores) stays small.
TASKS_PER_WORKER = 2

# What reaches Prefect (artifacts, logs, parameters, results) is ids and counts, never a
# subject id or memory text: Prefect keeps artifacts in its events too, which no API deletes,
# and a shared server or Prefect Cloud is outside our stores (docs/privacy.md).
CANDIDATES_NOTE = (
    "Candidates after this run, by id and counts only; their text stays in our stores: "
    "`memctl candidates --format json` or `memctl review show BATCH`"
)
# rows of the candidates artifact: a 1M-episode first night changes ~15k candidates, ~3 MB of
# table that Prefect's server refuses to publish as an event (its limit is 1.5 MB); the rest
# are listed by `memctl candidates`
ARTIFACT_ROWS = 1000


def _candidates_note(listed: int, changed: int) -> str:
    if listed == changed:
        return CANDIDATES_NOTE
    return f"{CANDIDATES_NOTE}. The first {listed:,} of {changed:,} (by tenant, namespace, id)."


def _stores(settings_data: dict[str, Any]) -> tuple[Settings, Stores]:
    settings = Settings.model_validate(settings_data)
    return settings, open_stores(settings)


@pipeline_task("consolidate-partitions")
def consolidate_partitions(
    *,
    settings_data: dict[str, Any],
    units: list[dict[str, Any]],
    run_id: str,
    now_iso: str,
    recluster: bool,
    processes: int = 0,
) -> list[dict[str, Any]]:
    """Cluster, then mine, for a batch of partitions, each under the stage ledger
    (stages/consolidate.py): one task run and one store open for the batch, not per partition.

    ``processes`` > 0: the batch is every partition of the night, computed in that many worker
    processes while this task's thread alone writes DuckDB (stages/consolidate_pool.py).

    Each partition still commits and ledgers on its own, so a crash or a retry redoes only the
    partitions without a ledger entry. On the threads runner the batch holds one DuckDB
    session (an open and a checkpointing close per partition were ~0.1 s wall each, paid 100
    times at 1M); worker processes (Dask, Ray) open per partition, so that no process keeps
    the file locked against the others for a whole batch."""
    settings, stores = _stores(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    work = [
        LedgeredWork(
            stage=STAGE,
            partition=Partition(item["tenant_id"], item["namespace"]),
            input_hash=item["input_hash"],
            watermark_at=datetime.fromisoformat(item["max_recorded_iso"])
            if item["max_recorded_iso"]
            else None,
        )
        for item in units
    ]
    if processes > 0:
        from memory_core.stages.consolidate_pool import consolidate_in_processes

        pool = take_workers(run_id, processes)  # started with the run, if it could tell
        with pool if pool is not None else nullcontext():
            return consolidate_in_processes(
                stores, settings, ctx, work, recluster=recluster, workers=processes, pool=pool
            )
    with stores.meta.session() if settings.runner.kind == "threads" else nullcontext():
        # before any writes
        shared = read_shared_state(stores, [u.partition for u in work]) if len(work) > 1 else None
        return [
            consolidate(stores, settings, ctx, unit, recluster=recluster, shared=shared)
            for unit in work
        ]


def compute_processes(plan: list[PlannedPartition], settings: Settings) -> int:
    """Worker processes for the night's partitions (0: the runner's tasks do them in-thread).

    Processes only on the threads runner (Dask and Ray workers are processes already), only
    when configured (``runner.processes_from_episodes`` > 0) and only when the partitions with
    new episodes hold that many episodes or more: the workers' start-up (imports) would
    outweigh a small night's compute."""
    if not plan:
        return 0
    episodes = sum(p.work.episodes for p in plan if p.work.new_episodes > 0)
    return processes_for(settings, episodes)  # the rule the night's start uses too


def partition_batches(plan: list[PlannedPartition], tasks: int) -> list[list[int]]:
    """Plan indices split into at most ``tasks`` batches of about equal new work.

    Largest partitions first onto the lightest batch (LPT), then each batch in plan order: a
    handful of task runs per worker instead of one per partition, whose fixed cost (a Prefect
    task run, opening the stores) was paid 100 times at 1M episodes."""
    tasks = max(1, min(tasks, len(plan)))
    loads = [0] * tasks
    batches: list[list[int]] = [[] for _ in range(tasks)]
    order = sorted(range(len(plan)), key=lambda i: (-plan[i].work.new_episodes, i))
    for index in order:
        lightest = min(range(tasks), key=lambda b: (loads[b], b))
        batches[lightest].append(index)
        loads[lightest] += max(plan[index].work.new_episodes, 1)
    return [sorted(b) for b in batches if b]


@pipeline_task("embed-episodes")
def embed_task(*, settings_data: dict[str, Any], run_id: str, now_iso: str) -> dict[str, Any]:
    """Vectors for the episodes ingest stored without one, before anything clusters them."""
    from memory_core.embed import make_embedder
    from memory_core.stages.embed import embed_episodes, pending_embedding

    settings, stores = _stores(settings_data)
    if not pending_embedding(stores):  # no model load on a night with nothing to embed
        return {"pending_before": 0, "embedded": 0}
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    embedder = make_embedder(settings.embed)
    return embed_episodes(stores, settings, ctx, embedder=embedder).as_dict()


@pipeline_task("index-episodes")
def index_task(*, settings_data: dict[str, Any]) -> dict[str, Any]:
    """The day's episodes folded into the scalar indices every partition scan filters on."""
    _, stores = _stores(settings_data)
    return {"rows_folded": index_episodes(stores)}


@pipeline_task("extract-facts")
def extract_task(*, settings_data: dict[str, Any], run_id: str, now_iso: str) -> dict[str, Any]:
    """Facts from raw conversations: Claude in batch, a replay, or skipped (and said so)."""
    from memory_core.stages.extract import extract_facts

    settings, stores = _stores(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    return extract_facts(stores, settings, ctx).as_dict()


@pipeline_task("score-candidates")
def score_task(
    *, settings_data: dict[str, Any], run_id: str, now_iso: str, sync: bool
) -> dict[str, Any]:
    """Importance for pending candidates: Claude in batch, or the labelled heuristic."""
    from memory_core.stages.score import score_candidates

    settings, stores = _stores(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    return score_candidates(stores, settings.score, ctx, sync=sync).as_dict()


@pipeline_task("workflow-text")
def workflow_task(*, settings_data: dict[str, Any], run_id: str, now_iso: str) -> dict[str, Any]:
    """Claude's workflow text for procedures that passed the policy (none without a key)."""
    from memory_core.stages.score.anthropic_scorer import build_client
    from memory_core.stages.score.workflow_text import write_workflow_texts

    settings, stores = _stores(settings_data)
    if not settings.score.workflow_text:
        return {"skipped": "score.workflow_text = false"}
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    client = build_client(settings.score)
    return write_workflow_texts(stores, settings.score, ctx, client=client).as_dict()


@pipeline_task("build-review-batches")
def review_task(*, settings_data: dict[str, Any], run_id: str, now_iso: str) -> dict[str, Any]:
    """Group scored candidates into bounded review batches; expire undecided old ones."""
    from memory_core.stages.review import build_review_batches

    settings, stores = _stores(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    with stores.meta.session():  # one open of the DuckDB file, not one per read and write
        return build_review_batches(stores, settings, ctx).as_dict()


@pipeline_task("staleness")
def staleness_task(*, settings_data: dict[str, Any], run_id: str, now_iso: str) -> dict[str, Any]:
    """Mark stale, contest, roll back failing procedures, judge canaries (stages/staleness)."""
    from memory_core.stages.staleness import run_staleness

    settings, stores = _stores(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), run_id=run_id)
    with stores.meta.session():  # one open of the DuckDB file, not one per read and write
        return run_staleness(stores, settings, ctx)


def _extract_line(extract: dict[str, Any]) -> str:
    if extract.get("skipped"):
        return str(extract["skipped"])
    label = f" ({extract['label']})" if extract.get("label") else ""
    return (
        f"{extract.get('mode')}{label}: {extract.get('requests_planned', 0)} request(s) planned, "
        f"{extract.get('facts_written', 0)} fact(s) written"
    )


def _summary_markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"# Nightly consolidation {summary['run_id']}",
        "",
        f"- clock: {summary['now']}",
        f"- partitions: {summary['partitions']} ({summary['skipped']} skipped, nothing new)",
        f"- extract: {_extract_line(summary.get('extract') or {})}",
        f"- candidates by status: {summary['candidates_by_status']}",
        "",
        "| partition | new members | clusters | candidates |",
        "| --- | --- | --- | --- |",
    ]
    for part in summary["results"]:
        if part.get("skipped"):
            lines.append(f"| {part['partition']} | skipped | | |")
            continue
        lines.append(
            f"| {part['partition']} | {part['cluster'].get('new_members')} | "
            f"{part['cluster'].get('total_clusters')} | {_mined_candidates(part['mine'])} |"
        )
    return "\n".join(lines)


_MINED_KINDS = ("procedural", "insights", "pitfalls", "preferences")


def _mined_candidates(mine: dict[str, Any]) -> int | str:
    """Candidates mined in the partition: every kind MiningResult counts (procedural ones
    whether they passed the gate or not); blank when the mine result carries no counts."""
    counts = [mine[k] for k in _MINED_KINDS if isinstance(mine.get(k), int)]
    return sum(counts) if counts else ""


@flow(
    name="nightly-consolidation",
    task_runner=ThreadPoolTaskRunner(max_workers=2),
    log_prints=False,
)
def nightly_consolidation(
    *,
    settings_data: dict[str, Any],
    now_iso: str,
    recluster: bool = False,
    sync: bool = False,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Consolidate every partition with new episodes; publish candidates and a summary.

    The run holds the home's pipeline lease (memory_core/lease.py) from start to end: a second
    start waits ``lease.wait_s`` and then fails naming the holder.

    On the threads runner it also keeps the DuckDB file open from start to end
    (``MetaStore.session``): the tasks run in this process and their connections share the
    open database, so closing one no longer checkpoints it, and the night checkpoints once,
    at its end, instead of after every task (each rewrote the candidates' row groups it had
    touched: at 1M 0.36 s of the score task, ~0.1 s of workflow text and of review,
    BENCHMARKS.md s43). Another process (a reviewer's ``memctl review``) waits for the file,
    as it already did through the partitions, most of a night."""
    settings, stores = _stores(settings_data)
    ctx = RunContext(now=datetime.fromisoformat(now_iso), **({"run_id": run_id} if run_id else {}))
    with (
        gc_frozen(),  # what the process held before the run: left out of gc's walks
        # the control plane open for the run (see below); tasks on Dask or Ray run in other
        # processes, which must open the file themselves
        stores.meta.session() if settings.runner.kind == "threads" else nullcontext(),
        hold_lease(
            stores.meta,
            holder=ctx.run_id,
            flow="nightly-consolidation",
            ttl_s=settings.lease.ttl_s,
            wait_s=settings.lease.wait_s,
        ),
        # the partitions' worker processes start now, while the steps before them run
        warm_workers(ctx.run_id, stores, settings),
    ):
        crash_point("nightly.leased")
        try:
            return _consolidate(
                settings,
                stores,
                ctx,
                settings_data=settings_data,
                now_iso=now_iso,
                recluster=recluster,
                sync=sync,
            )
        except Exception as exc:  # the runs table says failed, not running forever
            finish_run(
                stores.meta,
                run_id=ctx.run_id,
                finished_at=datetime.now(UTC),
                status="failed",
                summary={"error": type(exc).__name__},
            )
            raise


def _consolidate(
    settings: Settings,
    stores: Stores,
    ctx: RunContext,
    *,
    settings_data: dict[str, Any],
    now_iso: str,
    recluster: bool,
    sync: bool,
) -> dict[str, Any]:
    """The flow's body, inside the lease."""
    logger = get_run_logger()
    start_run(
        stores.meta,
        run_id=ctx.run_id,
        flow="nightly-consolidation",
        started_at=datetime.now(UTC),
        clock=ctx.now,
        params={"recluster": recluster},
    )
    embedded = embed_task.submit(
        settings_data=settings_data, run_id=ctx.run_id, now_iso=now_iso
    ).result()
    crash_point("nightly.embedded")
    indexed = index_task.submit(settings_data=settings_data).result()
    extracted = extract_task.submit(
        settings_data=settings_data, run_id=ctx.run_id, now_iso=now_iso
    ).result()
    if extracted.get("skipped"):
        logger.warning("%s", extracted["skipped"])
    crash_point("nightly.extracted")
    plan = consolidation_plan(stores, settings, recluster=recluster)
    processes = compute_processes(plan, settings)
    if processes:  # one task: its thread is the one DuckDB writer, the compute in processes
        batches = [list(range(len(plan)))]
    else:
        release_workers(ctx.run_id)  # started for a night that turned out small
        batches = partition_batches(plan, TASKS_PER_WORKER * settings.runner.max_workers)
    futures = [
        consolidate_partitions.submit(
            settings_data=settings_data,
            units=[
                {
                    "tenant_id": plan[i].unit.partition.tenant_id,
                    "namespace": plan[i].unit.partition.namespace,
                    "input_hash": plan[i].unit.input_hash,
                    "max_recorded_iso": plan[i].unit.watermark_at.isoformat()
                    if plan[i].unit.watermark_at
                    else None,
                }
                for i in batch
            ],
            run_id=ctx.run_id,
            now_iso=now_iso,
            recluster=recluster,
            processes=processes,
        )
        for batch in batches
    ]
    by_index: dict[int, dict[str, Any]] = {}
    for batch, future in zip(batches, futures, strict=True):
        by_index.update(zip(batch, future.result(), strict=True))
    results = [by_index[i] for i in range(len(plan))]
    crash_point("nightly.partitions_done")
    scored = score_task.submit(
        settings_data=settings_data, run_id=ctx.run_id, now_iso=now_iso, sync=sync
    ).result()
    crash_point("nightly.scored")
    workflows = workflow_task.submit(
        settings_data=settings_data, run_id=ctx.run_id, now_iso=now_iso
    ).result()
    batched = review_task.submit(
        settings_data=settings_data, run_id=ctx.run_id, now_iso=now_iso
    ).result()
    crash_point("nightly.batched")
    staleness = staleness_task.submit(
        settings_data=settings_data, run_id=ctx.run_id, now_iso=now_iso
    ).result()
    crash_point("nightly.stale_checked")
    by_status = count_by_status(stores.meta)
    produced, changed = run_candidate_rows(stores.meta, ctx.run_id, limit=ARTIFACT_ROWS)
    # the night's writes into the file while the Lance counts and the artifacts are made
    stores.meta.checkpoint_behind()
    summary: dict[str, Any] = {
        "run_id": ctx.run_id,
        "now": ctx.now.isoformat(),
        "partitions": len(plan),
        "partition_tasks": len(batches),
        "partition_processes": processes,
        "skipped": sum(1 for r in results if r.get("skipped")),
        "results": results,
        "embed": embedded,
        "index": indexed,
        "extract": extracted,
        "score": scored,
        "workflow_text": workflows,
        "review": batched,
        "staleness": staleness,
        "candidates_by_status": dict(sorted(by_status.items())),
        "rows_by_status": rows_by_status(stores),  # the report's history of the Lance tables
        "runner": describe_runner(settings.runner),
    }
    create_table_artifact(
        key="nightly-candidates",
        table=produced,
        description=_candidates_note(len(produced), changed),
    )
    create_markdown_artifact(key="nightly-summary", markdown=_summary_markdown(summary))
    finish_run(
        stores.meta,
        run_id=ctx.run_id,
        finished_at=datetime.now(UTC),
        status="completed",
        summary=summary,
    )
    try:
        rows_now = summary["rows_by_status"]  # counted above; nothing wrote Lance since
        data = collect_report(stores, rows_now=rows_now)
        summary["report"] = str(write_report(stores, settings.home, data=data))
    except Exception as exc:  # the run's work is committed; a report must not fail it
        logger.warning("HTML report not written: %s", exc)
    logger.info(
        "nightly run %s: %d partitions, %d skipped", ctx.run_id, len(plan), summary["skipped"]
    )
    return summary


def run_nightly(
    settings: Settings, *, now: datetime, recluster: bool = False, sync: bool = False
) -> dict[str, Any]:
    """Run the flow once (ephemeral Prefect server unless PREFECT_API_URL points elsewhere).

    The task runner is configuration (``[runner]``, flows/runners.py): threads by default,
    a Dask or Ray cluster when one machine is not enough.
    """
    from flows.ephemeral import no_heartbeats_to_an_ephemeral_server, start_ephemeral_server
    from flows.runners import task_runner

    start_ephemeral_server()  # dies with this process, even SIGKILLed (no orphan server)
    runner = task_runner(settings.runner)
    with no_heartbeats_to_an_ephemeral_server():
        return nightly_consolidation.with_options(task_runner=runner)(
            settings_data=settings.model_dump(mode="json"),
            now_iso=now.isoformat(),
            recluster=recluster,
            sync=sync,
        )
