"""The shapes of the demo world: problems with root causes, and the tenants that meet them.

A :class:`Problem` is one recurring intent (say "VPN fails with error 720"). It is always seen
with the same ``error_code`` but has several root causes; each :class:`Cause` names a boolean
condition key (``"adapter_mismatch"``) that is ``"true"`` exactly when it is the root cause, and
the ordered action pattern that fixes it. Applying a cause's fix when another cause is at work
fails, which is what makes the condition key the separating precondition of the procedure.
``distractors`` are plausible action patterns that never become true procedures; the trap
generator draws from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["Cause", "Problem", "TenantPlan"]


@dataclass(frozen=True)
class Cause:
    """One root cause of a problem and the action pattern that fixes it."""

    key: str
    steps: tuple[str, ...]
    finding: str


@dataclass(frozen=True)
class Problem:
    """A recurring intent: several root causes behind one error code."""

    key: str
    namespace: str
    error_code: str
    goals: tuple[str, ...]
    causes: tuple[Cause, ...]
    distractors: tuple[tuple[str, ...], ...]
    escalation: tuple[str, ...]
    resolved_note: str
    failure_note: str

    def subset(self, *cause_keys: str) -> Problem:
        """The same problem as a tenant meets it, with only some of its root causes."""
        causes = tuple(c for c in self.causes if c.key in cause_keys)
        if len(causes) != len(cause_keys) or len(causes) < 2:
            msg = f"{self.key}: bad cause subset {cause_keys}"
            raise ValueError(msg)
        return replace(self, causes=causes)


@dataclass(frozen=True)
class TenantPlan:
    """A tenant, its users and the problems its agents are asked to solve."""

    tenant_id: str
    subjects: tuple[str, ...]
    problems: tuple[Problem, ...]
    subject_namespace: dict[str, str]

    @property
    def namespaces(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.namespace for p in self.problems))
