"""Lance commits that lose a race with another writer, retried against the latest version.

Lance commits optimistically: two processes that both change a table's indices (the
nightly flow folding new episodes into its scalar indices, an MCP server folding its saves
every ``mcp.index_every``) may both start from one version, and the second to commit gets
``Retryable commit conflict ... CreateIndex preempted by concurrent CreateIndex``. Nothing
is written by the loser, so doing the action again from the latest version is safe; giving
up after a few tries raises :class:`~memory_core.errors.CommitConflict`, a transient error
that the flow's task retry (and the next night) takes up, instead of failing the night.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from memory_core.errors import CommitConflict

logger = logging.getLogger(__name__)

T = TypeVar("T")

_MARKERS = ("conflict", "retry", "concurrent", "preempted")


def is_commit_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is Lance telling a writer that another commit came first."""
    if not isinstance(exc, (OSError, RuntimeError, ValueError)):
        return False
    text = str(exc).lower()
    return any(marker in text for marker in _MARKERS)


def retry_on_commit_conflict(
    action: Callable[[], T],
    *,
    table: str,
    what: str,
    attempts: int = 6,
    first_delay: float = 0.05,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``action`` until it commits; it must reopen the table at its latest version
    itself (a retry from the stale handle would lose the same race again)."""
    delay = first_delay
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except (OSError, RuntimeError, ValueError) as exc:
            if not is_commit_conflict(exc):
                raise
            if attempt == attempts:
                raise CommitConflict(table, what, attempts, str(exc)) from exc
            logger.info("%s on %s: commit conflict (attempt %d), retrying", what, table, attempt)
            sleep(delay)
            delay = min(delay * 2, 1.0)
    raise AssertionError  # unreachable: the loop returns or raises
