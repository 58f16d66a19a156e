"""Types shared by the scorers and the stage: what a score is, what a run spent, the protocol.

A scorer answers per candidate with exactly one of four outcomes, and the difference matters:

* ``Scored``: a real score with the name of who gave it (``anthropic`` or ``heuristic``);
* a *fallback* reason: the LLM cannot score this candidate (bad key, a request the API refuses,
  an answer that failed validation twice), so the heuristic scores it and says why;
* a *deferral* reason: the failure is temporary (rate limit, overload, timeout, expiry), so the
  candidate stays ``pending_score`` and the next run tries again, instead of being frozen with a
  weaker score it did not need;
* an *over budget* reason: the run's token or cost limit left no room for its request; it stays
  ``pending_score`` without any score, and goes first in the next run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from memory_core.config import ScoreConfig
from memory_core.models import Candidate
from memory_core.stages.score.evidence import Evidence

__all__ = [
    "ScoreInput",
    "ScoreSource",
    "Scored",
    "Scorer",
    "ScorerName",
    "ScoringReport",
    "Usage",
]

ScorerName = Literal["anthropic", "heuristic"]
ScoreSource = Literal["sync", "batch", "cache", "heuristic"]


@dataclass(frozen=True)
class Usage:
    """Token counts as the API reports them (``input_tokens`` excludes cache reads/writes)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.requests + other.requests,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def total_input(self) -> int:
        """Every input token processed, cached or not: what an input-token budget limits."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @classmethod
    def from_api(cls, usage: Any, *, requests: int = 1) -> Usage:
        """From an SDK ``Usage`` (cache fields may be absent or null)."""
        return cls(
            requests=requests,
            input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            cache_read_tokens=int(getattr(usage, "cache_read_input_tokens", 0) or 0),
            cache_write_tokens=int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
        )

    def cost_usd(self, config: ScoreConfig, *, batch: bool) -> float:
        """Estimated price from the config's table; batch discount stacks with cache prices."""
        per_mtok = (
            self.input_tokens * config.price_input_per_mtok
            + self.output_tokens * config.price_output_per_mtok
            + self.cache_read_tokens * config.price_cache_read_per_mtok
            + self.cache_write_tokens * config.price_cache_write_per_mtok
        )
        factor = (1.0 - config.batch_discount) if batch else 1.0
        return per_mtok / 1_000_000 * factor

    def as_dict(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@dataclass(frozen=True)
class ScoreInput:
    """What a scorer needs about one candidate: the record and its evidence summary."""

    candidate: Candidate
    evidence: Evidence


@dataclass(frozen=True)
class Scored:
    """One importance score on the 1-5 scale, with who gave it and why."""

    importance: int
    scorer: ScorerName
    rationale: str
    kind_check: str
    risk_flags: tuple[str, ...]
    source: ScoreSource
    model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    answer: dict[str, Any] | None = None  # the validated LLM answer, what the cache stores


@dataclass
class ScoringReport:
    """What one scorer call produced; every candidate it was given lands in exactly one map."""

    scores: dict[str, Scored] = field(default_factory=dict)
    fallbacks: dict[str, str] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)
    over_budget: dict[str, str] = field(default_factory=dict)
    flags: dict[str, list[str]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    retries: int = 0

    def merge(self, other: ScoringReport) -> None:
        self.scores.update(other.scores)
        self.fallbacks.update(other.fallbacks)
        self.deferred.update(other.deferred)
        self.over_budget.update(other.over_budget)
        for cid, flags in other.flags.items():
            self.flags.setdefault(cid, []).extend(flags)
        self.usage = self.usage + other.usage
        self.retries += other.retries


class Scorer(Protocol):
    """Anything that turns candidates into scores, fallbacks or deferrals."""

    name: ScorerName

    def score(self, inputs: Sequence[ScoreInput]) -> ScoringReport: ...
