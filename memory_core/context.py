"""The run context threaded through every stage: run id, the clock, and who acts."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["Partition", "RunContext"]


@dataclass(frozen=True)
class RunContext:
    """``now`` is the run's clock: pass ``--now`` and the same input gives the same output."""

    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    run_id: str = field(default_factory=lambda: f"run_{uuid.uuid4().hex[:16]}")
    actor: str = "memctl"
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.now.tzinfo is None:
            msg = "RunContext.now must be timezone-aware"
            raise ValueError(msg)


@dataclass(frozen=True, order=True)
class Partition:
    """The unit of parallel work: one (tenant, namespace) scope. Nothing crosses it."""

    tenant_id: str
    namespace: str

    @property
    def key(self) -> str:
        return f"{self.tenant_id}/{self.namespace}"
