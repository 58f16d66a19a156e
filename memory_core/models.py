"""Records that pass between stages, and the enums of the interface contract.

Every timestamp is timezone-aware UTC: valid time (``occurred_at``, ``valid_from``/``valid_to``)
is kept apart from transaction time (``recorded_at``) so history can be asked both ways.
Models that cross a stage boundary are frozen: a stage returns new records, it never edits
the ones it was handed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

from memory_core.steps import ToolCall, step_text

__all__ = [
    "NO_CONTROL_PATTERN",
    "Authority",
    "Candidate",
    "CandidateKind",
    "CandidateStatus",
    "Claim",
    "ClaimSpec",
    "Episode",
    "IdStr",
    "Outcome",
    "ProcedureSpec",
    "Provenance",
    "Sensitivity",
    "SourceRef",
    "SourceRole",
    "Status",
    "UtcDatetime",
    "content_hash",
    "evidence_band",
    "finite_vector",
    "no_control",
    "stable_id",
    "utc",
]


def utc(value: datetime) -> datetime:
    """Normalise to UTC; naive datetimes are refused because their meaning is a guess."""
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        msg = "timestamp has no timezone; use RFC3339 with an offset, e.g. 2026-07-01T09:00:00Z"
        raise ValueError(msg)
    return value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(utc)]

# C0 and C1 control characters and DEL: an id holding one (a NUL, a newline, an escape) cannot
# be typed back on a command line (`memctl forget --subject`), breaks logs and receipts, and
# is almost always a bug upstream. Checked at the model, so both ingest paths refuse it alike.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def no_control(value: str) -> str:
    """Refuse control characters (NUL, newline, tab, escape, DEL, C1) in an identifier."""
    found = _CONTROL.search(value)
    if found is not None:
        msg = f"control character U+{ord(found.group()):04X} at position {found.start()}"
        raise ValueError(msg)
    return value


# Checked by pydantic-core's own regex (about 0.1 us a field, a tenth of a Python validator
# on the ingest path); the error's type is ``string_pattern_mismatch`` on the field.
NO_CONTROL_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"
IdStr = Annotated[str, StringConstraints(pattern=NO_CONTROL_PATTERN)]

_FLOAT32_MAX = 3.4028234663852886e38


def finite_vector(value: list[float] | None) -> list[float] | None:
    """A stored vector must be finite in float32 and not all zero: an infinite or overflowing
    value, or a zero vector, makes a cluster with a zero centroid that recall never returns."""
    if value is None:
        return None
    for i, x in enumerate(value):
        if not math.isfinite(x):
            spelled = "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
            msg = f"value {i} is {spelled}; vectors must be finite numbers"
            raise ValueError(msg)
        if abs(x) > _FLOAT32_MAX:
            msg = f"value {i} ({x:g}) overflows float32 (largest {_FLOAT32_MAX:.6g})"
            raise ValueError(msg)
    if value and not any(value):
        msg = "is all zeros; a zero vector has no direction (omit it to embed the text)"
        raise ValueError(msg)
    return value


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the basis of every content hash."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value`` (hex, 32 chars are plenty for ids)."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:32]


def evidence_band(count: int) -> int:
    """0 for none, then one band per power of two (1, 2-3, 4-7, 8-15, ...)."""
    return count.bit_length()


def stable_id(prefix: str, *parts: Any) -> str:
    """Deterministic id from scope + content + policy version, so reruns upsert, not duplicate."""
    return f"{prefix}_{content_hash(list(parts))[:24]}"


def pitfall_candidate_id(
    tenant_id: str, namespace: str, procedural_candidate_id: str, policy_version: str
) -> str:
    """The id of the pitfall candidate that qualifies a procedural candidate (one at most).

    Mining names the pitfall by it; the read path recomputes it from a served procedure's
    ``candidate_id`` to place the pitfall next to its procedure, with no link column.
    """
    return stable_id(
        "cand", "semantic", tenant_id, namespace, "", ["pitfall", procedural_candidate_id],
        policy_version,
    )  # fmt: skip


class Status(StrEnum):
    """Lifecycle of a row in a Lance table agents read (transitions: ``memory_core.lifecycle``)."""

    active = "active"
    expired = "expired"
    superseded = "superseded"
    revoked = "revoked"
    stale = "stale"
    contested = "contested"
    deprecated = "deprecated"
    canary = "canary"  # a procedure version served to a fraction of subjects first


class SourceRole(StrEnum):
    user = "user"
    agent = "agent"
    tool = "tool"
    system = "system"


class Outcome(StrEnum):
    success = "success"
    failure = "failure"
    partial = "partial"
    unknown = "unknown"


class Sensitivity(StrEnum):
    low = "low"
    medium = "medium"
    high = "high"


class Authority(StrEnum):
    """Who vouches for a record; decides what it may become (invariant 5).

    ``user_statement`` is the only authority a preference may have; ``human_approved`` is the
    only one a procedure may have; ``observation`` (tool or agent output) never instructs.
    """

    user_statement = "user_statement"
    human_approved = "human_approved"
    system = "system"
    agent_inference = "agent_inference"
    observation = "observation"
    none = "none"

    @classmethod
    def of_role(cls, role: SourceRole) -> Authority:
        return {
            SourceRole.user: cls.user_statement,
            SourceRole.system: cls.system,
            SourceRole.agent: cls.agent_inference,
            SourceRole.tool: cls.observation,
        }[role]

    @property
    def rank(self) -> int:
        """Higher outranks lower when facts compete for the same (subject, predicate)."""
        return {
            "none": 0,
            "observation": 1,
            "agent_inference": 2,
            "system": 3,
            "user_statement": 4,
            "human_approved": 5,
        }[self.value]


class CandidateKind(StrEnum):
    semantic = "semantic"
    procedural = "procedural"


class CandidateStatus(StrEnum):
    pending_score = "pending_score"
    pending_review = "pending_review"
    approved = "approved"
    rejected = "rejected"
    promoted = "promoted"
    auto_rejected = "auto_rejected"
    revoked = "revoked"


_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Claim(BaseModel):
    """A statement the write path extracted from an episode: a candidate, never a fact."""

    model_config = _FROZEN
    predicate: str = Field(min_length=1, max_length=200)
    object: str = Field(min_length=1, max_length=2000)
    span: str | None = Field(default=None, max_length=4000)


class SourceRef(BaseModel):
    """A corpus document (and its revision) an episode relied on."""

    model_config = _FROZEN
    source_id: IdStr = Field(min_length=1, max_length=500)
    revision: IdStr = Field(min_length=1, max_length=200)


class Episode(BaseModel):
    """One line of an ingest file (interface contract v1, DESIGN.md section 5)."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)

    episode_id: IdStr = Field(min_length=1, max_length=200, description="immutable event id")
    tenant_id: IdStr = Field(min_length=1, max_length=200)
    subject_id: IdStr = Field(min_length=1, max_length=200)
    namespace: IdStr = Field(default="default", min_length=1, max_length=200)
    session_id: IdStr | None = Field(default=None, max_length=200)
    occurred_at: UtcDatetime = Field(description="valid time of the experience")
    recorded_at: UtcDatetime | None = Field(
        default=None, description="transaction time; ingest time when absent"
    )
    source_role: SourceRole
    goal: str | None = Field(default=None, max_length=4000)
    actions: list[str | ToolCall] = Field(
        default_factory=list,
        max_length=200,
        description="steps: free text (v1) or {tool, args} tool calls (v1.1)",
    )
    outcome: Outcome = Outcome.unknown
    conditions: dict[str, str] = Field(default_factory=dict)
    observations: list[str] = Field(default_factory=list, max_length=500)
    feedback: str | None = Field(default=None, max_length=4000)
    text: str | None = Field(default=None, max_length=100_000)
    claims: list[Claim] = Field(default_factory=list, max_length=200)
    sensitivity: Sensitivity = Sensitivity.low
    consent_basis: IdStr | None = Field(default=None, max_length=200)
    purpose: IdStr | None = Field(default=None, max_length=200)
    expires_at: UtcDatetime | None = None
    sources: list[SourceRef] = Field(default_factory=list, max_length=200)
    procedure_id: IdStr | None = Field(default=None, max_length=200)
    procedure_version: IdStr | None = Field(default=None, max_length=50)
    vector: Annotated[list[float] | None, AfterValidator(finite_vector)] = None

    @field_validator("actions")
    @classmethod
    def _actions_non_empty(cls, value: list[str | ToolCall]) -> list[str | ToolCall]:
        for i, action in enumerate(value):
            if isinstance(action, str) and not action.strip():
                msg = f"action {i} is empty"
                raise ValueError(msg)
        return value

    @field_validator("conditions")
    @classmethod
    def _condition_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key or len(key) > 200:
                msg = f"condition key {key!r} must be 1-200 characters"
                raise ValueError(msg)
        return value

    def content(self) -> dict[str, Any]:
        """What the episode says, without transport fields: the basis of its content hash."""
        return self.model_dump(mode="json", exclude={"recorded_at", "vector"})

    def content_hash(self) -> str:
        return content_hash(self.content())

    def embedding_text(self) -> str:
        """The text an embedder sees: goal, actions, conditions, then free text."""
        return embedding_text_of(
            self.episode_id, self.goal, self.actions, self.conditions, self.text, self.feedback
        )


def embedding_text_of(
    episode_id: str,
    goal: str | None,
    actions: list[Any] | None,
    conditions: dict[str, Any] | None,
    text: str | None,
    feedback: str | None,
) -> str:
    """``Episode.embedding_text`` from plain fields (a stored row), without building a model:
    pydantic's ``model_construct`` cost ~5 ms a row in default factories."""
    parts: list[str] = []
    if goal:
        parts.append(goal)
    if actions:
        parts.append("actions: " + "; ".join(step_text(a) for a in actions))
    if conditions:
        parts.append("conditions: " + ", ".join(f"{k}={v}" for k, v in sorted(conditions.items())))
    if text:
        parts.append(text)
    if feedback:
        parts.append(feedback)
    # MiniLM reads at most 256 word pieces and costs grow with length: the leading fields
    # carry what clustering needs, so long free text is cut.
    return ("\n".join(parts) or episode_id)[:EMBED_TEXT_CHARS]


EMBED_TEXT_CHARS = 512


class Provenance(BaseModel):
    """A source a derived record rests on, pinned by content hash."""

    model_config = _FROZEN
    source_id: str
    source_kind: str = Field(default="episode", description="episode | fact | procedure | corpus")
    content_hash: str | None = None
    subject_id: str | None = None
    revision: str | None = None


class ClaimSpec(BaseModel):
    model_config = _FROZEN
    predicate: str
    object: str


class ProcedureSpec(BaseModel):
    model_config = _FROZEN
    name: str
    steps: list[str]
    preconditions: dict[str, str] = Field(default_factory=dict)


class Candidate(BaseModel):
    """A memory the pipeline proposes; policy decides, people approve (invariant 6)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    candidate_id: str
    kind: CandidateKind
    tenant_id: str
    subject_id: str | None = Field(description="null at tenant scope")
    namespace: str
    claim: ClaimSpec | None = None
    procedure: ProcedureSpec | None = None
    conditions: dict[str, str] = Field(default_factory=dict)
    support_ids: list[str] = Field(default_factory=list)
    counterexample_ids: list[str] = Field(default_factory=list)
    confidence: float = Field(ge=0.0, le=1.0)
    importance: float | None = None
    scorer: str | None = None
    status: CandidateStatus
    reason: str = ""
    authority: Authority = Authority.none
    text: str = Field(default="", description="one human-readable line a reviewer reads first")
    stats: dict[str, Any] = Field(default_factory=dict)
    supersedes: str | None = None
    cluster_id: str | None = None
    policy_version: str = "1"
    provenance: list[Provenance] = Field(default_factory=list)

    def contract_dict(self) -> dict[str, Any]:
        """The shape `memctl candidates --format json` promises (plus extra keys)."""
        return self.model_dump(mode="json")

    def _statement(self) -> dict[str, Any]:
        """What the candidate says, apart from its evidence: both hashes start from it."""
        return {
            "kind": self.kind,
            "scope": [self.tenant_id, self.subject_id, self.namespace],
            "claim": self.claim.model_dump() if self.claim else None,
            "procedure": self.procedure.model_dump() if self.procedure else None,
            "conditions": self.conditions,
        }

    def content_hash(self) -> str:
        """Hash of what the candidate claims and rests on; the score cache key."""
        return self._content_hash(self._statement())

    def _content_hash(self, statement: dict[str, Any]) -> str:
        return content_hash(
            {
                **statement,
                "support": sorted(self.support_ids),
                "counter": sorted(self.counterexample_ids),
            }
        )

    def hashes(self) -> tuple[str, str]:
        """``(content_hash(), score_basis())``, the statement they share built once (a
        worker hashes every candidate it builds: ~14k a 1M 1% night)."""
        statement = self._statement()
        return self._content_hash(statement), self._score_basis(statement)

    def score_basis(self) -> str:
        """Hash of what the candidate's importance score stands for: its content and the
        size of its evidence in powers of two, not the evidence ids.

        Why: the upsert keeps a scored candidate's score (and its place in review) while this
        stays the same. Every night's new supporting episode changes ``content_hash``; had
        each one sent a scored candidate back to ``pending_score``, a growing store would pay
        a model call per candidate per night to restate what it already said (most of the
        1M bench's 1% night rewrites), and reviewers would see their queue reshuffle nightly.
        The score is asked again when the evidence doubles, or its first counterexample (or
        the next power of two of them) arrives: the points where the prompt's evidence
        summary says something new."""
        return self._score_basis(self._statement())

    def _score_basis(self, statement: dict[str, Any]) -> str:
        return content_hash(
            {
                **statement,
                "support_band": evidence_band(len(set(self.support_ids))),
                "counter_band": evidence_band(len(set(self.counterexample_ids))),
            }
        )
