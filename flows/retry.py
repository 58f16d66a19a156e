"""Task retries: only a ``TransientError`` is retried (memory_core/errors.py).

A transient error (a DuckDB file held for a moment, a store briefly unreachable) may pass on a
second try; a terminal one (bad input, bad config, a refused write, a bug) fails the same way
again, so retrying it only delays the failure. Every task in flows/ is declared with
:func:`pipeline_task`, which passes ``retry_condition_fn=transient_only``: Prefect calls it
when a try failed and retries only if it returns True. Retrying is safe because every stage is
idempotent on its inputs (ARCHITECTURE.md, "How a run converges after a crash").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from memory_core.errors import TransientError

__all__ = ["pipeline_task", "transient_only"]


def transient_only(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: retry a failed try only if it raised a TransientError."""
    try:
        state.result()
    except TransientError:
        return True
    except BaseException:  # anything else is terminal for the task
        return False
    return False


def pipeline_task(name: str, *, retries: int = 1, retry_delay_s: float = 2) -> Callable[..., Any]:
    """``@task`` as every pipeline task uses it: no result cache (stages read and write the
    stores; the stage ledger, not Prefect, skips done work) and ``retries`` tries more on a
    TransientError only."""
    return task(
        name=name,
        cache_policy=NO_CACHE,
        retries=retries,
        retry_delay_seconds=retry_delay_s,
        retry_condition_fn=transient_only,
    )
