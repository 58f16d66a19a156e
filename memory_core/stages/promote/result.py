"""What one promotion commit did, per candidate (the CLI, the flows and review print it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CommitResult"]


@dataclass
class CommitResult:
    """What one commit did, per candidate; ``as_dict`` is what the CLI and flows print."""

    batch_id: str | None
    reviewer: str
    promoted: dict[str, str] = field(default_factory=dict)  # candidate -> row id
    superseded: dict[str, str] = field(default_factory=dict)  # old row id -> new row id
    versions: dict[str, str] = field(default_factory=dict)  # superseded version -> old row id
    unchanged: list[str] = field(default_factory=list)
    conflicts: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    facts: list[str] = field(default_factory=list)
    procedures: list[str] = field(default_factory=list)
    lineage_edges: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "promoted": len(self.promoted),
            "facts": len(self.facts),
            "procedures": len(self.procedures),
            "superseded": len(self.superseded),
            "unchanged": len(self.unchanged),
            "conflicts": len(self.conflicts),
            "refused": len(self.refused),
            "lineage_edges": self.lineage_edges,
        }

    def merge(self, other: CommitResult) -> CommitResult:
        """Fold another commit of the same batch (another reviewer's items) into this one."""
        self.promoted.update(other.promoted)
        self.superseded.update(other.superseded)
        self.unchanged.extend(other.unchanged)
        self.conflicts.update(other.conflicts)
        self.refused.update(other.refused)
        self.facts.extend(other.facts)
        self.procedures.extend(other.procedures)
        self.lineage_edges += other.lineage_edges
        if other.reviewer != self.reviewer:
            self.reviewer = ", ".join(sorted({*self.reviewer.split(", "), other.reviewer}))
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "reviewer": self.reviewer,
            **self.counts(),
            "promoted_ids": dict(sorted(self.promoted.items())),
            "superseded_ids": dict(sorted(self.superseded.items())),
            "conflict_reasons": dict(sorted(self.conflicts.items())),
            "refused_reasons": dict(sorted(self.refused.items())),
        }
