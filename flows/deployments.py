"""Deployments: the schedules ``memctl serve`` serves and prefect.yaml declares, from one table.

Scheduled runs cannot carry the run's clock or a settings dict fixed when the deployment was
made, so each deployment's entry point is a small flow taking only ``home`` and ``config``
(both optional: a worker's ``MEMCTL_HOME`` / ``MEMCTL_CONFIG`` apply). It loads the settings
when it runs, takes ``now`` from the wall clock and calls the real flow as a subflow.

* ``nightly-consolidation`` (``schedule.nightly_cron``): holds the home's pipeline lease.
* ``forgetting`` (``schedule.forgetting_cron``, later): waits up to ``lease.forgetting_wait_s``
  for a consolidation still running, so it always runs after it, never beside it.
* ``deletion-requests`` (``schedule.deletion_cron``, every 15 minutes): queued user deletions.
* ``review-dispatch`` (``schedule.review_cron``): starts one top-level ``promotion-review`` run
  per open batch that no live run holds (one that failed or was cancelled does not); that
  deployment has no schedule, and a deployed review run suspends (the process exits) until a
  reviewer answers in the UI or with ``memctl review``.

Crons are read in the top-level ``timezone`` of the config. prefect.yaml is rendered from the
same table (``render_prefect_yaml``); tests keep the checked-in file equal to the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.schedules import Cron, Interval

from flows.forgetting import deletion_requests, forgetting
from flows.nightly import nightly_consolidation
from flows.review import promotion_review
from memory_core.config import Settings, load_settings

__all__ = [
    "DEPLOYMENTS",
    "DeploymentSpec",
    "build_deployments",
    "render_prefect_yaml",
    "review_dispatch",
    "scheduled_consolidation",
    "scheduled_deletions",
    "scheduled_forgetting",
]

REVIEW_DEPLOYMENT = "promotion-review/promotion-review"


def _settings(home: str | None, config: str | None) -> Settings:
    return load_settings(
        config_file=Path(config) if config else None, home=Path(home) if home else None
    )


def _now() -> str:
    return datetime.now(UTC).isoformat()


@flow(name="scheduled-consolidation", log_prints=False)
def scheduled_consolidation(home: str | None = None, config: str | None = None) -> dict[str, Any]:
    """The nightly consolidation at the wall clock's now."""
    settings = _settings(home, config)
    return nightly_consolidation(settings_data=settings.model_dump(mode="json"), now_iso=_now())


@flow(name="scheduled-forgetting", log_prints=False)
def scheduled_forgetting(home: str | None = None, config: str | None = None) -> dict[str, Any]:
    """The nightly forgetting pass (waits for a running consolidation's lease)."""
    settings = _settings(home, config)
    return forgetting(settings_data=settings.model_dump(mode="json"), now_iso=_now())


@flow(name="scheduled-deletions", log_prints=False)
def scheduled_deletions(home: str | None = None, config: str | None = None) -> list[dict[str, Any]]:
    """Queued user deletions (``memctl forget --queue``), oldest first."""
    settings = _settings(home, config)
    return deletion_requests(settings_data=settings.model_dump(mode="json"), now_iso=_now())


STUCK_AFTER = timedelta(hours=1)
"""A promotion-review run is pending or running for seconds between its waits (it waits
suspended, or paused); one in either state this long lost its process (a killed runner or
worker never reports), and would hold its batch forever."""


def _run_holds(client: Any, flow_run_id: str, now: datetime) -> str | None:
    """The state in which a batch's recorded run still holds it; None when the run is over,
    gone or stuck (a stuck one is marked crashed first), so the batch needs another run."""
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Crashed

    try:
        run = client.read_flow_run(UUID(flow_run_id))
    except (ValueError, ObjectNotFound):
        return None
    state = run.state
    if state is None or state.is_final():
        return None
    if (state.is_pending() or state.is_running()) and now - state.timestamp > STUCK_AFTER:
        msg = f"{state.name} since {state.timestamp:%Y-%m-%d %H:%M} UTC: its process is gone"
        client.set_flow_run_state(run.id, Crashed(message=msg), force=True)
        return None
    return state.name


@flow(name="review-dispatch", log_prints=False)
def review_dispatch(home: str | None = None, config: str | None = None) -> list[str]:
    """Start a top-level ``promotion-review`` run for every open batch no live run holds.

    A batch whose recorded run failed, crashed, was cancelled, is gone, or is stuck pending or
    running (``STUCK_AFTER``) gets a new run (the old run's stored form inputs are deleted
    first), so no batch is stranded. Runs are started with
    ``as_subflow=False``: Prefect suspends only top-level runs."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from flows.review import drop_run_inputs
    from memory_core.stores import open_stores
    from memory_core.stores.review import list_batches, set_flow_run

    settings = _settings(home, config)
    stores = open_stores(settings)
    logger = get_run_logger()
    started = []
    with get_client(sync_client=True) as client:
        for batch in list_batches(stores.meta, status="open"):
            if batch.flow_run_id:
                state = _run_holds(client, batch.flow_run_id, datetime.now(UTC))
                if state is not None:
                    continue
                logger.info(
                    "batch %s: its run %s is over or stuck; starting another",
                    batch.batch_id, batch.flow_run_id,
                )  # fmt: skip
                drop_run_inputs(batch.flow_run_id)
            run = run_deployment(
                REVIEW_DEPLOYMENT,
                parameters={
                    "settings_data": settings.model_dump(mode="json"),
                    "batch_id": batch.batch_id,
                },
                timeout=0,  # do not wait: the review run waits for people, for days
                as_subflow=False,  # a subflow cannot be suspended
            )
            set_flow_run(stores.meta, batch.batch_id, str(run.id))  # held from now on
            started.append(str(run.id))
    logger.info("review-dispatch: %d review run(s) started", len(started))
    return started


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment: its name, entry flow, and which cron of ``[schedule]`` fires it."""

    name: str
    entrypoint: str
    cron_key: str | None
    description: str

    @property
    def flow(self) -> Any:
        return _FLOWS[self.entrypoint]

    def cron(self, settings: Settings) -> str | None:
        return getattr(settings.schedule, self.cron_key) if self.cron_key else None


_FLOWS = {
    "flows/deployments.py:scheduled_consolidation": scheduled_consolidation,
    "flows/deployments.py:scheduled_forgetting": scheduled_forgetting,
    "flows/deployments.py:scheduled_deletions": scheduled_deletions,
    "flows/deployments.py:review_dispatch": review_dispatch,
    "flows/review.py:promotion_review": promotion_review,
}

DEPLOYMENTS: tuple[DeploymentSpec, ...] = (
    DeploymentSpec(
        "nightly-consolidation",
        "flows/deployments.py:scheduled_consolidation",
        "nightly_cron",
        "Cluster, mine, score and batch for review every partition with new episodes.",
    ),
    DeploymentSpec(
        "forgetting",
        "flows/deployments.py:scheduled_forgetting",
        "forgetting_cron",
        "TTL, decay, purpose expiry, compaction into digests, Lance maintenance; after "
        "consolidation (waits for its lease).",
    ),
    DeploymentSpec(
        "deletion-requests",
        "flows/deployments.py:scheduled_deletions",
        "deletion_cron",
        "Carry out queued user deletions with version purge, verification and receipts.",
    ),
    DeploymentSpec(
        "review-dispatch",
        "flows/deployments.py:review_dispatch",
        "review_cron",
        "Start a promotion-review run for each open review batch no run is waiting on.",
    ),
    DeploymentSpec(
        "promotion-review",
        "flows/review.py:promotion_review",
        None,
        "One review batch: publish it, wait for a reviewer's decision, commit it.",
    ),
)


def select(names: list[str] | None) -> list[DeploymentSpec]:
    """The named deployments (all when ``names`` is empty); unknown names raise ValueError."""
    if not names:
        return list(DEPLOYMENTS)
    known = {d.name: d for d in DEPLOYMENTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        msg = f"unknown deployment(s) {', '.join(unknown)}; known: {', '.join(known)}"
        raise ValueError(msg)
    return [known[n] for n in names]


def build_deployments(
    settings: Settings,
    *,
    names: list[str] | None = None,
    interval_s: float | None = None,
    home: str | None = None,
    config: str | None = None,
) -> list[Any]:
    """RunnerDeployments for ``prefect.serve``; ``interval_s`` replaces every cron (trying it
    out, tests). Scheduled ones allow one run at a time and queue the next."""
    from prefect.client.schemas.objects import (
        ConcurrencyLimitConfig,
        ConcurrencyLimitStrategy,
    )

    out = []
    params = {k: v for k, v in (("home", home), ("config", config)) if v is not None}
    for spec in select(names):
        cron = spec.cron(settings)
        if cron is None:
            out.append(spec.flow.to_deployment(name=spec.name, description=spec.description))
            continue
        schedule = (
            Interval(interval_s, timezone=settings.timezone)
            if interval_s
            else Cron(cron, timezone=settings.timezone)
        )
        out.append(
            spec.flow.to_deployment(
                name=spec.name,
                description=spec.description,
                schedules=[schedule],
                parameters=params,
                concurrency_limit=ConcurrencyLimitConfig(
                    limit=1, collision_strategy=ConcurrencyLimitStrategy.ENQUEUE
                ),
            )
        )
    return out


def render_prefect_yaml(settings: Settings, *, work_pool: str = "memctl") -> str:
    """prefect.yaml for running the same deployments on a Prefect server with a work pool."""
    lines = [
        "# Generated by `memctl serve --write-prefect-yaml prefect.yaml` from the config's",
        "# [schedule] crons and top-level timezone; regenerate it after changing them.",
        "# Deploy on a Prefect server with a work pool (see README, Run on a schedule):",
        f"#   prefect work-pool create {work_pool} --type process",
        "#   prefect deploy --all",
        f"#   MEMCTL_HOME=/path/to/home prefect worker start --pool {work_pool}",
        "name: memory-core",
        "prefect-version: 3.9.1",
        "build: null",
        "push: null",
        "pull:",
        "- prefect.deployments.steps.set_working_directory:",
        "    directory: .  # the worker runs from this checkout",
        "deployments:",
    ]
    for spec in DEPLOYMENTS:
        lines += [
            f"- name: {spec.name}",
            f"  entrypoint: {spec.entrypoint}",
            f'  description: "{spec.description}"',
            "  work_pool:",
            f"    name: {work_pool}",
        ]
        cron = spec.cron(settings)
        if cron is None:
            lines.append("  schedules: []")
            continue
        lines += [
            "  parameters: {}",
            "  schedules:",
            f'  - cron: "{cron}"',
            f"    timezone: {settings.timezone}",
            "  concurrency_limit:",
            "    limit: 1",
            "    collision_strategy: ENQUEUE",
        ]
    return "\n".join(lines) + "\n"
