"""The ingest write gate: what an episode becomes before anything is stored.

Every stored episode row passes here, so this is where two guarantees are kept: secrets are
redacted from every redactable text (goal, text, feedback, actions, observations, condition
values, claims), and claims from tool or agent episodes carry no authority (they are
observations, never statements a preference or fact could be promoted from). The content
hash is taken over the gated content, so it is the hash of what is stored. Not to be confused
with the commit gate (``stages/promote/commit_gate.py``), which checks authority at promotion.

The hash is SHA-256 of the canonical JSON (sorted keys, compact, ``ensure_ascii=False``),
written by orjson (the same bytes as ``json.dumps``; it falls back to ``canonical_json`` if
orjson refuses a value), so hashes already stored stay valid.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import datetime
from typing import Any

import orjson
import pyarrow as pa
from pydantic import BaseModel

from memory_core.models import Authority, Episode, SourceRole, canonical_json
from memory_core.stages.ingest.redact import Redactor, might_hold_secret
from memory_core.steps import encode_step
from memory_core.stores.schemas import TS

__all__ = ["ROW_COLUMNS", "ROW_SCHEMA", "gate_episode"]

_NO_AUTHORITY_ROLES = frozenset({SourceRole.tool, SourceRole.agent})
_ROLE_AUTHORITY = {role: Authority.of_role(role).value for role in SourceRole}
_JSON_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z
_REDACTED_KEYS = ("goal", "text", "feedback", "actions", "observations", "conditions", "claims")

# Columns of a chunk's table: the episodes schema's per-row columns, then helpers that the
# writer drops (_line: input line, _blocked: claims stripped of authority, _embed_text: what
# to embed when no vector was supplied).
ROW_COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("episode_id", pa.string()),
    ("session_id", pa.string()),
    ("occurred_at", TS),
    ("source_role", pa.string()),
    ("goal", pa.string()),
    ("actions", pa.list_(pa.string())),
    ("outcome", pa.string()),
    ("conditions", pa.string()),
    ("observations", pa.list_(pa.string())),
    ("feedback", pa.string()),
    ("claims", pa.string()),
    ("consent_basis", pa.string()),
    ("sources", pa.string()),
    ("procedure_id", pa.string()),
    ("procedure_version", pa.string()),
    ("redactions", pa.int32()),
    ("tenant_id", pa.string()),
    ("subject_id", pa.string()),
    ("namespace", pa.string()),
    ("recorded_at", TS),
    ("expires_at", TS),
    ("sensitivity", pa.string()),
    ("purpose", pa.string()),
    ("authority", pa.string()),
    ("content_hash", pa.string()),
    ("text", pa.string()),
    ("_line", pa.int64()),
    ("_blocked", pa.int32()),
    ("_embed_text", pa.string()),
)
ROW_SCHEMA = pa.schema([pa.field(name, kind) for name, kind in ROW_COLUMNS])


def _json_default(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError


def _dumps(value: object) -> str:
    try:
        return orjson.dumps(value, default=_json_default, option=_JSON_OPTS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return canonical_json(value)


def _content_hash(content: dict[str, Any], episode: Episode) -> str:
    """SHA-256 of the canonical JSON of the gated content (recorded_at and vector left out)."""
    try:
        payload = orjson.dumps(content, default=_json_default, option=_JSON_OPTS)
    except (TypeError, orjson.JSONEncodeError):  # what orjson refuses, json.dumps spells
        dumped = episode.model_dump(mode="json", exclude={"vector", "recorded_at"})
        dumped.update({k: v for k, v in content.items() if k in _REDACTED_KEYS})
        payload = canonical_json(dumped).encode()
    return hashlib.sha256(payload).hexdigest()[:32]


def gate_episode(
    number: int, episode: Episode, now: datetime, *, has_vector: bool
) -> tuple[tuple[Any, ...], Counter[str] | None]:
    """One row of ROW_COLUMNS (secrets redacted, tool/agent claims without authority), and
    what was redacted (None: nothing).

    Redacted: every string of goal, text, feedback, actions, observations, condition values
    and claims (predicate, object, span); one screen of all of them decides whether to look.
    """
    d = episode.__dict__
    role = d["source_role"]
    goal, text, feedback = d["goal"], d["text"], d["feedback"]
    actions, observations, conditions = d["actions"], d["observations"], d["conditions"]
    claims = [{"predicate": c.predicate, "object": c.object, "span": c.span} for c in d["claims"]]
    # tool calls are redacted as JSON values (their argument strings), then stored encoded
    actions = [a if isinstance(a, str) else a.model_dump(mode="json") for a in actions]
    texts = [goal or "", text or "", feedback or "", *map(encode_step, actions), *observations]
    if conditions:
        texts += conditions.values()
    for c in claims:
        texts += (c["predicate"], c["object"], c["span"] or "")
    content = d.copy()
    del content["vector"], content["recorded_at"]
    # "\0" cannot make a match inside one text disappear, so one screen of the join suffices.
    counts = None
    if might_hold_secret("\0".join(texts)):
        redactor = Redactor()
        gated = {
            "goal": redactor.value(goal),
            "text": redactor.value(text),
            "feedback": redactor.value(feedback),
            "actions": redactor.value(actions),
            "observations": redactor.value(observations),
            "conditions": redactor.value(conditions),
            "claims": redactor.value(claims),
        }
        content.update(gated)
        goal, text, feedback = gated["goal"], gated["text"], gated["feedback"]
        actions, observations = gated["actions"], gated["observations"]
        conditions, claims = gated["conditions"], gated["claims"]
        counts = redactor.counts
    no_authority = role in _NO_AUTHORITY_ROLES
    if claims:
        authority = Authority.none.value if no_authority else _ROLE_AUTHORITY[role]
        kind = "observation" if no_authority else "statement"
        for claim in claims:
            claim["authority"] = authority
            claim["kind"] = kind
        content["claims"] = claims
    chash = _content_hash(content, episode)
    embed_text = None
    if not has_vector:
        view = episode
        if counts:
            update = {"goal": goal, "text": text, "feedback": feedback, "actions": actions}
            view = episode.model_copy(update={**update, "conditions": conditions})
        embed_text = view.embedding_text()
    sources = d["sources"]
    actions = [encode_step(a) for a in actions]
    row = (
        d["episode_id"],
        d["session_id"],
        d["occurred_at"],
        role,
        goal,
        actions,
        d["outcome"],
        _dumps(conditions) if conditions else "{}",
        observations,
        feedback,
        _dumps(claims) if claims else "[]",
        d["consent_basis"],
        _dumps(sources) if sources else "[]",
        d["procedure_id"],
        d["procedure_version"],
        sum(counts.values()) if counts else 0,
        d["tenant_id"],
        d["subject_id"],
        d["namespace"],
        d["recorded_at"] or now,
        d["expires_at"],
        d["sensitivity"],
        d["purpose"],
        _ROLE_AUTHORITY[role],
        chash,
        text,
        number,
        len(claims) if no_authority else 0,
        embed_text,
    )
    return row, counts
