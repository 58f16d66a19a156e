"""Plumbing shared by the demo generators: the seeded clock, ids, episode dicts, truth tally.

All randomness flows through one :class:`random.Random`, consumed in a fixed order, so the
same seed gives byte-identical output. Nothing here reads the wall clock.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["SPAN_DAYS", "Builder", "Truth", "rfc3339"]

SPAN_DAYS = 60
ALNUM = string.ascii_letters + string.digits

Episode = dict[str, Any]


def rfc3339(value: datetime) -> str:
    """UTC, whole seconds, with a ``Z``: ``2026-06-01T09:30:00Z``."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Truth:
    """What the generator knows to be true, collected while it writes episodes."""

    procedures: list[dict[str, Any]] = field(default_factory=list)
    traps: list[dict[str, Any]] = field(default_factory=list)
    preferences: list[dict[str, Any]] = field(default_factory=list)
    injected_instructions: list[dict[str, Any]] = field(default_factory=list)
    agent_claims: list[dict[str, Any]] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)
    sensitive_episode_ids: list[str] = field(default_factory=list)
    intent_of_episode: dict[str, str] = field(default_factory=dict)


@dataclass
class Builder:
    """Makes episode dicts in the contract's field order and keeps them in creation order."""

    rng: random.Random
    start: datetime
    noise_pools: Mapping[str, Mapping[str, tuple[str, ...]]]
    episodes: list[Episode] = field(default_factory=list)
    _ids: set[str] = field(default_factory=set)

    def new_id(self, prefix: str) -> str:
        """A random-looking, seed-determined, unique id such as ``ep_3f2a...``."""
        while True:
            value = f"{prefix}_{self.rng.getrandbits(64):016x}"
            if value not in self._ids:
                self._ids.add(value)
                return value

    def moment(self, lo_day: float = 0, hi_day: float = SPAN_DAYS) -> datetime:
        """A working-hours instant on a day drawn from ``[lo_day, hi_day)`` after start."""
        day = min(int(self.rng.uniform(lo_day, hi_day)), SPAN_DAYS - 1)
        offset = timedelta(
            days=max(day, 0),
            hours=self.rng.randint(7, 18),
            minutes=self.rng.randint(0, 59),
            seconds=self.rng.randint(0, 59),
        )
        return self.start + offset

    def noise(self, namespace: str) -> dict[str, str]:
        """Environment facts that have nothing to do with the outcome."""
        return {key: self.rng.choice(values) for key, values in self.noise_pools[namespace].items()}

    def token(self, length: int, alphabet: str = ALNUM) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(length))

    def episode(
        self,
        *,
        tenant_id: str,
        subject_id: str,
        namespace: str,
        occurred_at: datetime,
        source_role: str,
        session_id: str | None = None,
        goal: str | None = None,
        actions: Iterable[str] = (),
        outcome: str = "unknown",
        conditions: Mapping[str, str] | None = None,
        observations: Iterable[str] = (),
        feedback: str | None = None,
        text: str | None = None,
        claims: Iterable[Mapping[str, str | None]] = (),
        sensitivity: str = "low",
        consent_basis: str | None = None,
        purpose: str | None = None,
        expires_at: datetime | None = None,
        sources: Iterable[Mapping[str, str]] = (),
    ) -> Episode:
        """Append one episode (a JSON-ready dict, no ``vector``) and return it."""
        if self.rng.random() < 0.9:
            delay = timedelta(seconds=self.rng.randint(1, 300))
        else:  # uploaded in a later batch
            delay = timedelta(hours=self.rng.randint(1, 6), seconds=self.rng.randint(0, 3599))
        episode: Episode = {
            "episode_id": self.new_id("ep"),
            "tenant_id": tenant_id,
            "subject_id": subject_id,
            "namespace": namespace,
            "session_id": session_id,
            "occurred_at": rfc3339(occurred_at),
            "recorded_at": rfc3339(occurred_at + delay),
            "source_role": source_role,
            "goal": goal,
            "actions": list(actions),
            "outcome": outcome,
            "conditions": dict(sorted((conditions or {}).items())),
            "observations": list(observations),
            "feedback": feedback,
            "text": text,
            "claims": [dict(c) for c in claims],
            "sensitivity": sensitivity,
            "consent_basis": consent_basis,
            "purpose": purpose,
            "expires_at": rfc3339(expires_at) if expires_at else None,
            "sources": [dict(s) for s in sources],
            "procedure_id": None,
            "procedure_version": None,
        }
        self.episodes.append(episode)
        return episode
