"""The orchestration layer as the library sees it (memory_core/orchestration.py).

Registered under the ``memory_core.orchestrator`` entry-point group in pyproject.toml, so
``memctl`` commands can start Prefect runs while memory_core never imports flows. Each
function imports its flow module when called: Prefect stays off the CLI's start-up path.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = [
    "prefect_store",
    "register_ephemeral_server",
    "render_prefect_yaml",
    "resume_review_run",
    "run_nightly",
    "run_promotion_review",
    "select",
    "serve_deployments",
]


def run_nightly(
    settings: Any, *, now: datetime, recluster: bool = False, sync: bool = False
) -> dict[str, Any]:
    from flows.nightly import run_nightly as run

    return run(settings, now=now, recluster=recluster, sync=sync)


def register_ephemeral_server() -> None:
    from flows.ephemeral import register_ephemeral_server as register

    register()


def prefect_store(home: Path) -> Any:
    from flows.privacy import prefect_store as store

    return store(home)


def resume_review_run(flow_run_id: str, request: Any) -> Any:
    from flows.review import resume_review_run as resume

    return resume(flow_run_id, request)


def run_promotion_review(settings: Any, batch_id: str) -> Any:
    from flows.review import run_promotion_review as run

    return run(settings, batch_id)


def render_prefect_yaml(settings: Any) -> str:
    from flows.deployments import render_prefect_yaml as render

    return render(settings)


def select(names: list[str] | None) -> list[Any]:
    from flows.deployments import select as pick

    return pick(names)


def serve_deployments(*args: Any, **kwargs: Any) -> Any:
    from flows.serve import serve_deployments as serve

    return serve(*args, **kwargs)
