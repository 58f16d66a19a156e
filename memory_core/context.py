"""The run context threaded through every stage: run id, the clock, and who acts."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

__all__ = ["Partition", "RunContext"]

SEP = (",", ":")


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
        """One text key per partition, as stored in the stage ledger: the compact JSON array
        ``["tenant", "namespace"]``. Never the joined ``tenant/namespace``: tenant ``team/a``
        with namespace ``b`` and tenant ``team`` with namespace ``a/b`` would share it."""
        return json.dumps([self.tenant_id, self.namespace], ensure_ascii=False, separators=SEP)

    @classmethod
    def from_key(cls, key: str) -> Partition:
        """The partition of a ``key``; ValueError for anything else."""
        try:
            value = json.loads(key)
        except ValueError as exc:
            msg = f"not a partition key: {key!r}"
            raise ValueError(msg) from exc
        if not (
            isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)
        ):
            msg = f"not a partition key: {key!r}"
            raise ValueError(msg)
        return cls(value[0], value[1])
