"""One transcript line -> episode records: the part shared by every provider format.

A line is one session: ``{session_id, tenant_id, subject_id, namespace?, started_at?,
outcome?, conditions?, sensitivity?, consent_basis?, purpose?, expires_at?, messages: [...]}``
(the Anthropic format also takes a top-level ``system``). A provider adapter turns its
messages into :class:`Part` objects (one role, one text, the tool calls made); this module
turns the parts into episode dicts of the v1 contract:

- one episode per part, ``source_role`` from the part (a tool result is ``tool`` whatever
  role the provider's message had: tool output never gets user authority), text only;
- valid time: a message's own ``timestamp`` (RFC3339) when it has one, else ``started_at``
  for the first part and the previous part + 1 ms after it; always at least 1 ms after the
  previous part, so the stored order is the transcript's order. Without ``started_at`` the
  first message must carry a timestamp: the time must be the same on every re-ingest, so the
  ingest clock cannot stand in for it;
- ids from (tenant, session) and the message index (``tx-<hash>-m0003``; ``.r1`` for the
  second tool result inside one message; ``-sys`` for a top-level system prompt), so a
  re-ingest of the same line is a no-op and a changed line a conflict;
- one trajectory episode when the agent called tools or the line states an ``outcome`` (a
  judged run that needed no tool keeps its outcome): goal = the user's first request,
  actions = the tool calls in order (``ToolCall``), outcome from the line (else unknown),
  conditions from the line, valid time 1 ms after the last part; ``observations`` name the
  calls the provider marked as failed (Anthropic ``is_error``; an OpenAI tool result read as
  an error), and such a call is kept with ``failed: true`` (it was made, it changed nothing);
- a message with no text and no tool call (an empty turn) makes no episode; a tool result
  always does (an empty result is information), with ``conditions.tool`` naming the tool.

Everything a line says is checked here, and a problem raises :class:`TranscriptError` naming
the line, the message index and the field; the episode records are validated again by ingest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn

from pydantic import TypeAdapter, ValidationError

from memory_core.errors import FieldError, TerminalError
from memory_core.models import (
    Outcome,
    Sensitivity,
    SourceRole,
    UtcDatetime,
    content_hash,
    no_control,
)
from memory_core.steps import ToolCall, call_dict, step_text

__all__ = [
    "MAX_ACTIONS",
    "MAX_TEXT_CHARS",
    "Adapted",
    "Bad",
    "Part",
    "SessionHeader",
    "TranscriptError",
    "build_episodes",
    "fail",
    "kind_of",
    "parse_arguments",
    "parse_header",
    "parse_json_line",
    "parse_time",
]

MAX_TEXT_CHARS = 100_000  # Episode.text's limit: longer tool output is cut, and says so
MAX_GOAL_CHARS = 4000  # Episode.goal's limit
MAX_ACTIONS = 200  # Episode.actions' limit: a longer run keeps its first calls, and says so
_STEP = timedelta(milliseconds=1)
_TIME = TypeAdapter(UtcDatetime)
_ID_CHARS = 200


class TranscriptError(TerminalError):
    """One bad transcript line: its number, the field (with the message index) and why."""

    def __init__(self, error: FieldError) -> None:
        self.error = error
        super().__init__(str(error))


class Bad(Exception):
    """Raised inside an adapter: the field path (``messages[3].content``) and the reason."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


def fail(field: str, reason: str) -> NoReturn:
    """Raise :class:`Bad` (one place, so call sites stay one readable line)."""
    raise Bad(field, reason)


@dataclass(frozen=True)
class Part:
    """One episode-to-be: a message, or one tool result inside a provider's message.

    ``index`` is the message's position in ``messages`` (None: the top-level system prompt);
    ``sub`` numbers the tool results inside one message (None: the message itself).
    """

    index: int | None
    role: SourceRole
    text: str
    sub: int | None = None
    calls: tuple[ToolCall, ...] = ()
    tool: str | None = None
    is_error: bool = False
    call_ids: tuple[str | None, ...] = ()  # the provider's id of each call in ``calls``
    call_id: str | None = None  # for a tool result: the id of the call it answers
    timestamp: datetime | None = None

    @property
    def where(self) -> str:
        return "system" if self.index is None else f"messages[{self.index}]"


@dataclass(frozen=True)
class SessionHeader:
    """The line's own fields (everything but the messages), validated."""

    session_id: str
    tenant_id: str
    subject_id: str
    namespace: str = "default"
    started_at: datetime | None = None
    outcome: Outcome | None = None
    conditions: dict[str, str] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)  # privacy fields, on every episode


@dataclass(frozen=True)
class Adapted:
    """What one line became: episode dicts and, for each, the message it came from."""

    line: int
    session_id: str
    episodes: list[dict[str, Any]]
    origins: list[str]  # "messages[3]", "system" or "trajectory", one per episode
    trajectory: dict[str, Any] | None


# --- reading the line ---------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    msg = f"{name} is not a JSON number"
    raise ValueError(msg)


def parse_json_line(raw: str) -> Any:
    """``json.loads`` that refuses NaN/Infinity and reports nesting too deep as ``Bad``."""
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        fail("(line)", "JSON nested too deeply")
    except ValueError as exc:
        fail("(line)", f"not valid JSON: {exc}")


def parse_arguments(value: Any, where: str) -> dict[str, Any]:
    """A tool call's arguments: a JSON object, given as a JSON string (OpenAI) or an object.

    An empty string means no arguments (some providers send ``""`` for a call without any).
    """
    if isinstance(value, Mapping):
        if not finite(value):
            fail(where, "holds a number too large for JSON (infinite)")
        return dict(value)
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if not isinstance(value, str):
        fail(where, f"must be a JSON object or a string holding one, got {kind_of(value)}")
    try:
        parsed = json.loads(value, parse_constant=_no_constant)
    except RecursionError:
        fail(where, "JSON nested too deeply")
    except ValueError as exc:
        fail(where, f"not valid JSON: {exc}")
    if not isinstance(parsed, dict):
        fail(where, f"must hold a JSON object, got {kind_of(parsed)}")
    if not finite(parsed):
        fail(where, "holds a number too large for JSON (infinite)")
    return parsed


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )


def _str(line: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    value = line.get(key)
    if value is None:
        if required:
            fail(key, "required")
        return None
    if not isinstance(value, str) or not value.strip():
        fail(key, f"must be a non-empty string, got {kind_of(value)}")
    if len(value) > _ID_CHARS:
        fail(key, f"longer than {_ID_CHARS} characters")
    try:
        no_control(value)
    except ValueError as exc:
        fail(key, str(exc))
    return value


def parse_time(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        fail(where, f"must be an RFC3339 string, got {kind_of(value)}")
    try:
        return _TIME.validate_python(value)
    except ValidationError as exc:
        reason = exc.errors(include_url=False)[0]["msg"]
        fail(where, f"not an RFC3339 time with an offset ({reason})")


_HEADER_KEYS = frozenset(
    {
        "session_id",
        "tenant_id",
        "subject_id",
        "namespace",
        "started_at",
        "outcome",
        "conditions",
        "messages",
        "sensitivity",
        "consent_basis",
        "purpose",
        "expires_at",
    }
)


def parse_header(line: Any, *, extra_keys: frozenset[str] = frozenset()) -> SessionHeader:
    """The session fields of a parsed line; unknown keys are refused (a typo must not pass)."""
    if not isinstance(line, dict):
        fail("(line)", f"must be a JSON object (one session), got {kind_of(line)}")
    unknown = sorted(set(line) - _HEADER_KEYS - extra_keys)
    if unknown:
        allowed = ", ".join(sorted(_HEADER_KEYS | extra_keys))
        name = unknown[0] if unknown[0].isidentifier() else repr(unknown[0])
        fail(name, f"unknown field (a session line has: {allowed})")
    session_id = _str(line, "session_id", required=True) or ""
    tenant_id = _str(line, "tenant_id", required=True) or ""
    subject_id = _str(line, "subject_id", required=True) or ""
    namespace = _str(line, "namespace", required=False) or "default"
    started = line.get("started_at")
    started_at = None if started is None else parse_time(started, "started_at")
    outcome = None
    if line.get("outcome") is not None:
        try:
            outcome = Outcome(line["outcome"])
        except (ValueError, TypeError):
            choices = ", ".join(o.value for o in Outcome)
            fail("outcome", f"must be one of {choices}, got {line['outcome']!r}")
    conditions = line.get("conditions") or {}
    if not isinstance(conditions, dict) or not all(isinstance(v, str) for v in conditions.values()):
        fail("conditions", "must be an object of string values")
    for key in conditions:
        if not key or len(key) > _ID_CHARS:
            fail("conditions", f"key {key[:40]!r} must be 1-{_ID_CHARS} characters")
    shared: dict[str, Any] = {}
    if line.get("sensitivity") is not None:
        try:
            shared["sensitivity"] = Sensitivity(line["sensitivity"]).value
        except (ValueError, TypeError):
            choices = ", ".join(s.value for s in Sensitivity)
            fail("sensitivity", f"must be one of {choices}")
    for key in ("consent_basis", "purpose"):
        value = _str(line, key, required=False)
        if value is not None:
            shared[key] = value
    if line.get("expires_at") is not None:
        shared["expires_at"] = line["expires_at"]
        parse_time(line["expires_at"], "expires_at")
    messages = line.get("messages")
    if not isinstance(messages, list) or not messages:
        got = "empty" if messages == [] else kind_of(messages)
        fail("messages", f"must be a non-empty list of messages, got {got}")
    return SessionHeader(
        session_id, tenant_id, subject_id, namespace, started_at, outcome, conditions, shared
    )


# --- building the episodes ----------------------------------------------------------------


def _rfc3339(value: datetime) -> str:
    """Always with microseconds, so the strings sort as the times do."""
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = limit - len(f" …[cut: {len(text)} more characters]")  # room for the longest note
    return f"{text[:keep]} …[cut: {len(text) - keep} more characters]"


def _after(previous: datetime, where: str) -> datetime:
    """1 ms after ``previous``; a session at the very end of the calendar cannot go on."""
    try:
        return previous + _STEP
    except OverflowError:
        fail(where, "valid time would pass 9999-12-31: started_at or timestamp out of range")


def _episode_id(prefix: str, part: Part) -> str:
    if part.index is None:
        return f"{prefix}-sys"
    suffix = "" if part.sub is None else f".r{part.sub}"
    return f"{prefix}-m{part.index:04d}{suffix}"


def _part_text(part: Part) -> str:
    """A message's text; an agent's tool calls are written out, so the text says what it did
    (the structured calls go to the trajectory only)."""
    lines = [part.text] if part.text else []
    lines += [f"[tool call] {step_text(call)}" for call in part.calls]
    return "\n".join(lines)


def build_episodes(
    number: int,
    header: SessionHeader,
    parts: Sequence[Part],
    *,
    enrich: Callable[[dict[str, Any]], None] | None = None,
) -> Adapted:
    """Episode dicts for one session's parts (see the module docstring for the rules)."""
    prefix = "tx-" + content_hash([header.tenant_id, header.session_id])[:16]
    common: dict[str, Any] = {
        "tenant_id": header.tenant_id,
        "subject_id": header.subject_id,
        "namespace": header.namespace,
        "session_id": header.session_id,
        **header.shared,
    }
    episodes: list[dict[str, Any]] = []
    origins: list[str] = []
    previous: datetime | None = None
    goal: str | None = None
    calls: list[ToolCall] = []
    position: dict[str, int] = {}  # call id -> index in ``calls``
    failed: list[str] = []
    for part in parts:
        if part.role is SourceRole.user and goal is None and part.text.strip():
            goal = _cut(part.text.strip(), MAX_GOAL_CHARS)
        for offset, call_id in enumerate(part.call_ids[: len(part.calls)]):
            if call_id:
                position[call_id] = len(calls) + offset
        calls += part.calls
        if part.is_error:  # a failed call, said so by the provider: the trajectory keeps it
            failed.append(_cut(f"{part.tool} failed: {' '.join(part.text.split())}", 200))
            at_call = position.get(part.call_id or "")
            if at_call is not None:  # made, but it changed nothing (steps.ToolCall.failed)
                calls[at_call] = calls[at_call].model_copy(update={"failed": True})
        text = _part_text(part)
        if not text.strip() and part.tool is None:
            continue  # nothing said (an empty message): no episode, the ids stay put
        at = part.timestamp
        if at is None:
            at = header.started_at if previous is None else _after(previous, part.where)
        if at is None:
            where = f"{part.where}.timestamp"
            fail(
                "started_at",
                f"required when the messages carry no timestamp ({where} is absent): valid "
                "time must be the same on every re-ingest",
            )
        if previous is not None and at <= previous:
            at = _after(previous, part.where)  # same or earlier time: the order wins
        previous = at
        episode: dict[str, Any] = {
            **common,
            "episode_id": _episode_id(prefix, part),
            "occurred_at": _rfc3339(at),
            "source_role": part.role.value,
            "text": _cut(text, MAX_TEXT_CHARS) if text else None,
        }
        if part.tool is not None:
            episode["conditions"] = {"tool": part.tool[:200]}
            if part.is_error:
                episode["conditions"]["tool_error"] = "true"
        episodes.append(episode)
        origins.append(part.where)
    trajectory = None
    if calls or header.outcome is not None:  # a run that called tools, or one judged
        trajectory = _trajectory(prefix, common, header, goal, calls, previous)
        trajectory["observations"] += failed[:50]
        if enrich is not None:
            enrich(trajectory)
        episodes.append(trajectory)
        origins.append("trajectory")
    return Adapted(number, header.session_id, episodes, origins, trajectory)


def _trajectory(
    prefix: str,
    common: dict[str, Any],
    header: SessionHeader,
    goal: str | None,
    calls: list[ToolCall],
    last: datetime | None,
) -> dict[str, Any]:
    at = header.started_at if last is None else _after(last, "trajectory")
    if at is None:
        fail("started_at", "required when no message has text or a timestamp")
    observations = []
    if len(calls) > MAX_ACTIONS:
        observations.append(f"{len(calls)} tool calls; the first {MAX_ACTIONS} are kept")
    trajectory: dict[str, Any] = {
        **common,
        "episode_id": f"{prefix}-trajectory",
        "occurred_at": _rfc3339(at),
        "source_role": SourceRole.agent.value,
        "goal": goal,
        "actions": [call_dict(c) for c in calls[:MAX_ACTIONS]],
        "outcome": (header.outcome or Outcome.unknown).value,
        "conditions": dict(header.conditions),
        "observations": observations,
    }
    return trajectory


def finite(value: Any) -> bool:
    """No NaN or infinity anywhere in a JSON value (json.loads of an object cannot make them
    once ``parse_constant`` refuses them, but a float overflow like 1e999 can)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    if isinstance(value, list):
        return all(finite(v) for v in value)
    return True
