"""Turn tau-bench tool-calling trajectories into episode-contract records.

Why: tau-bench gives real agent runs in which the same goal succeeds in some trials and fails in
others, which is what procedure mining and counterexample search need to be measured on. A run's
``traj`` is an OpenAI chat transcript (``tool_calls`` and ``tool`` results), so each run goes
through the user-facing ``openai-chat`` adapter (``memory_core.transcripts``), as a user's logs
would: one episode per message, and one trajectory episode with the tool calls and their
arguments; the outcome comes from the run's ``reward``.

What goes in an episode is only what the run itself shows: the user's first message as the goal,
the tools the agent really called, environment facts read from tool *results*, and short digests.
The task's gold ``actions`` (and its ``instruction``) are scoring labels: they are read only to
build :attr:`TauConversion.intent_of_episode` and never reach an episode field, otherwise an
evaluation would measure the labels rather than the pipeline.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from memory_core.transcripts import TranscriptError, TranscriptFormat, adapt_session

__all__ = [
    "AIRLINE_CONDITION_RULES",
    "FieldRule",
    "TauConversion",
    "convert_tau_bench",
    "extract_conditions",
    "id_kind",
    "intent_label",
    "load_tau_bench",
    "mask_identifiers",
    "tau_session",
]

_STOP_MARKER = "###STOP###"
_SCALARS = (str, int, float, bool)


def id_kind(value: str) -> str:
    """``credit_card_4421486`` -> ``credit_card``: the kind of an id, without the identity."""
    return re.sub(r"_\d+$", "", value)


_ID_TOKEN = re.compile(r"[A-Za-z_]*\d[\w.:\-+]*")


def mask_identifiers(text: str) -> str:
    """Replace every token that holds a digit (ids, dates, amounts) with ``#``.

    Error messages then group by kind ("not enough seats on flight #") instead of by instance.
    """
    return _ID_TOKEN.sub("#", text)


@dataclass(frozen=True)
class FieldRule:
    """How to read one condition from JSON tool results.

    ``path`` lists dict keys from the root of a tool result; ``"*"`` matches any one key (for
    dicts keyed by id) and lists are transparent (a list of objects is walked item by item at
    the same path). ``tools`` limits the rule to the results of those tools (``None``: any).
    ``fold`` says how values seen across the episode become one string: ``"values"`` joins the
    distinct values, sorted; ``"first"``/``"last"`` keep one; ``"count"`` takes the length of
    the list found at ``path`` (distinct lengths, sorted).
    """

    name: str
    path: tuple[str, ...]
    tools: frozenset[str] | None = None
    fold: Literal["values", "first", "last", "count"] = "values"
    transform: Callable[[str], str] | None = None


_USER_TOOLS = frozenset({"get_user_details"})
_RESERVATION_TOOLS = frozenset(
    {
        "get_reservation_details",
        "book_reservation",
        "cancel_reservation",
        "update_reservation_flights",
        "update_reservation_baggages",
        "update_reservation_passengers",
    }
)

#: Facts of the airline domain that decide what the policy allows (membership and cabin set the
#: free bags and whether a change is allowed, insurance and status the cancellation, payment
#: kinds what can pay for a change). Identities (names, ids, addresses, flight numbers) are left
#: out on purpose: they do not generalise across episodes.
AIRLINE_CONDITION_RULES: tuple[FieldRule, ...] = (
    FieldRule("membership", ("membership",), _USER_TOOLS),
    FieldRule("payment_methods", ("payment_methods", "*", "source"), _USER_TOOLS),
    FieldRule("cabin", ("cabin",), _RESERVATION_TOOLS),
    FieldRule("flight_type", ("flight_type",), _RESERVATION_TOOLS),
    FieldRule("insurance", ("insurance",), _RESERVATION_TOOLS),
    FieldRule("reservation_status", ("status",), _RESERVATION_TOOLS),
    FieldRule("passengers", ("passengers",), _RESERVATION_TOOLS, fold="count"),
    FieldRule("flight_legs", ("flights",), _RESERVATION_TOOLS, fold="count"),
    FieldRule("total_baggages", ("total_baggages",), _RESERVATION_TOOLS),
    FieldRule(
        "paid_with", ("payment_history", "payment_id"), _RESERVATION_TOOLS, transform=id_kind
    ),
)


@dataclass(frozen=True)
class TauConversion:
    """Episodes to ingest, and labels kept beside them for scoring only.

    ``episodes`` holds every episode the adapter made (one per message, then the run's
    trajectory), ``trajectories`` the trajectory episodes alone; ``intent_of_episode`` labels
    the trajectories, ``task_of_episode`` every episode. ``sessions`` are the ``openai-chat``
    lines the episodes came from.
    """

    episodes: list[dict[str, Any]]
    intent_of_episode: dict[str, str]
    task_of_episode: dict[str, str]
    skipped: list[str] = field(default_factory=list)
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class _ToolResult:
    name: str
    content: str


def load_tau_bench(path: Path) -> list[dict[str, Any]]:
    """Read a tau-bench trajectory file (a JSON list of runs)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        msg = f"{path}: expected a JSON list of tau-bench runs, got {type(data).__name__}"
        raise ValueError(msg)
    return data


def intent_label(item: Mapping[str, Any]) -> str:
    """The scoring label: sorted distinct gold action names joined by ``|`` ("" if none)."""
    actions = ((item.get("info") or {}).get("task") or {}).get("actions") or []
    return "|".join(sorted({str(a.get("name")) for a in actions if a.get("name")}))


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _message_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, list):  # multi-part content: keep the text parts
        parts = [p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content]
        content = " ".join(p for p in parts if p)
    return str(content).replace(_STOP_MARKER, "").strip()


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"


def _walk(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every value reachable through dict keys, with its key path (lists are transparent)."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            child = (*path, str(key))
            yield child, value
            yield from _walk(value, child)
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, _SCALARS):
                yield path, item
            else:
                yield from _walk(item, path)


def _matches(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(pattern) == len(path) and all(
        p in ("*", k) for p, k in zip(pattern, path, strict=True)
    )


def _scalar_str(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _parse_json(content: str) -> Any:
    try:
        return json.loads(content)
    except (json.JSONDecodeError, ValueError):
        return None


def _is_error(content: str) -> bool:
    return content.lstrip().lower().startswith("error")


def extract_conditions(
    results: Iterable[tuple[str, str]],
    rules: Sequence[FieldRule] = AIRLINE_CONDITION_RULES,
    *,
    error_key: str | None = "tool_error",
    max_values: int = 4,
    max_keys: int = 12,
    max_chars: int = 200,
) -> dict[str, str]:
    """Environment facts from ``(tool name, result text)`` pairs, as a small ``{str: str}``.

    Only JSON results are read by the rules; results that start with "Error" are folded into
    ``error_key`` with identifiers masked, so the same failure kind reads the same everywhere.
    """
    seen: dict[str, list[str]] = {rule.name: [] for rule in rules}
    errors: list[str] = []
    for name, content in results:
        if _is_error(content):
            message = re.sub(r"^\s*error:?\s*", "", content, flags=re.IGNORECASE)
            errors.append(mask_identifiers(message).strip())
            continue
        parsed = _parse_json(content)
        if parsed is None or isinstance(parsed, _SCALARS):
            continue
        nodes = list(_walk(parsed))
        for rule in rules:
            if rule.tools is not None and name not in rule.tools:
                continue
            for path, value in nodes:
                if not _matches(rule.path, path):
                    continue
                if rule.fold == "count":
                    if isinstance(value, list):
                        seen[rule.name].append(str(len(value)))
                    continue
                if value is None or not isinstance(value, _SCALARS):
                    continue
                text = _scalar_str(value)
                if rule.transform is not None:
                    text = rule.transform(text)
                if text:
                    seen[rule.name].append(text)

    conditions: dict[str, str] = {}
    for rule in rules:
        values = seen[rule.name]
        if not values:
            continue
        if rule.fold == "first":
            folded = values[0]
        elif rule.fold == "last":
            folded = values[-1]
        else:
            distinct = sorted(set(values), key=lambda v: (len(v), v) if v.isdigit() else (0, v))
            folded = ",".join(distinct[:max_values])
            if len(distinct) > max_values:
                folded += f",+{len(distinct) - max_values}"
        conditions[rule.name] = _truncate(folded, max_chars)
    if error_key and errors:
        conditions[error_key] = _truncate("; ".join(sorted(set(errors))), max_chars)
    return dict(list(conditions.items())[:max_keys])


#: Keys left out of observation digests: personal details say nothing about how a task went.
_PRIVATE_KEYS = frozenset({"email", "dob", "address", "name", "first_name", "last_name"})


def _digest(content: str) -> str:
    """A one-line view of a tool result: top-level scalars of an object, or a list's size."""
    parsed = _parse_json(content)
    if isinstance(parsed, Mapping):
        pairs = [
            f"{k}={_scalar_str(v)}"
            for k, v in parsed.items()
            if isinstance(v, _SCALARS) and k not in _PRIVATE_KEYS
        ]
        nested = [
            k
            for k, v in parsed.items()
            if v is not None and not isinstance(v, _SCALARS) and k not in _PRIVATE_KEYS
        ]
        if nested:
            pairs.append("has " + ",".join(nested))
        return " ".join(pairs)
    if isinstance(parsed, list):
        return f"{len(parsed)} results"
    return " ".join(content.split())


def _observations(results: Sequence[_ToolResult], limit: int, max_chars: int) -> list[str]:
    """Up to ``limit`` short result snippets in trajectory order; errors are kept first."""
    snippets: list[tuple[int, bool, str]] = []
    seen: set[str] = set()
    for index, result in enumerate(results):
        body = _digest(result.content)
        if not body:
            continue
        line = _truncate(f"{result.name}: {body}", max_chars)
        if line in seen:
            continue
        seen.add(line)
        snippets.append((index, _is_error(result.content), line))
    chosen = sorted(snippets, key=lambda s: (not s[1], s[0]))[:limit]
    return [line for _, _, line in sorted(chosen)]


def _clean(message: Mapping[str, Any]) -> dict[str, Any]:
    """A trajectory message as the openai-chat adapter takes it: the user simulator's stop
    marker removed, and ``tool_calls`` that older logs kept as a JSON string parsed."""
    out = dict(message)
    if out.get("role") == "user" and isinstance(out.get("content"), str):
        out["content"] = out["content"].replace(_STOP_MARKER, "").strip()
    calls = out.get("tool_calls")
    if isinstance(calls, str):
        with contextlib.suppress(json.JSONDecodeError):  # else the adapter names the field
            out["tool_calls"] = json.loads(calls)
    return out


def _tool_results(messages: Sequence[Mapping[str, Any]]) -> list[_ToolResult]:
    """(tool name, result text) of each tool message, the name read from its call."""
    name_of_call: dict[str, str] = {}
    results: list[_ToolResult] = []
    for message in messages:
        if message.get("role") == "assistant" and isinstance(message.get("tool_calls"), list):
            for call in message["tool_calls"]:
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping) and call.get("id"):
                    name_of_call[str(call["id"])] = str(function.get("name"))
        elif message.get("role") == "tool":
            name = name_of_call.get(str(message.get("tool_call_id"))) or message.get("name")
            content = message.get("content")
            results.append(
                _ToolResult(str(name or "tool"), "" if content is None else str(content))
            )
    return results


def tau_session(
    item: Mapping[str, Any], *, tenant_id: str, namespace: str, started_at: datetime
) -> dict[str, Any]:
    """One tau-bench run as an ``openai-chat`` session line (what ``memctl ingest --from
    openai-chat`` reads): its ``traj`` messages, the run's user, and the outcome from its
    ``reward`` (1.0 success, anything else failure). Nothing of ``info.task`` but the user id
    (the conversation's own subject) goes in."""
    user_id = ((item.get("info") or {}).get("task") or {}).get("user_id") or "unknown"
    reward = item.get("reward")
    success = isinstance(reward, int | float) and float(reward) == 1.0
    return {
        "session_id": f"task{item['task_id']}-trial{item['trial']}",
        "tenant_id": tenant_id,
        "subject_id": str(user_id),
        "namespace": namespace,
        "started_at": _rfc3339(started_at),
        "outcome": "success" if success else "failure",
        "messages": [_clean(m) for m in item.get("traj") or []],
    }


def _enricher(
    session: Mapping[str, Any],
    rules: Sequence[FieldRule],
    max_text_chars: int,
    max_observations: int,
) -> Callable[[dict[str, Any]], None]:
    """What the evaluation adds to a trajectory: conditions and digests read from the tool
    results with the data set's rules, and the user's turns as its text."""

    def enrich(trajectory: dict[str, Any]) -> None:
        messages = [m for m in session["messages"] if isinstance(m, Mapping)]
        results = _tool_results(messages)
        user_turns = [t for m in messages if m.get("role") == "user" if (t := _message_text(m))]
        trajectory["conditions"] = {
            **trajectory["conditions"],
            **extract_conditions(((r.name, r.content) for r in results), rules),
        }
        trajectory["observations"] += _observations(results, max_observations, 200)
        if user_turns:
            trajectory["text"] = _truncate("\n".join(user_turns), max_text_chars)

    return enrich


def convert_tau_bench(
    items: list[dict[str, Any]],
    *,
    tenant_id: str = "tau-airline",
    namespace: str = "airline",
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
    condition_rules: Sequence[FieldRule] = AIRLINE_CONDITION_RULES,
    max_text_chars: int = 2000,
    max_observations: int = 6,
) -> TauConversion:
    """Each run (task_id, trial) through the ``openai-chat`` adapter: one episode per message
    and one trajectory episode (goal, the tool calls with their arguments, outcome), which the
    data set's condition rules and digests enrich. The session starts at ``start`` + the run's
    index in minutes, so the output is the same on every call. Runs without
    ``task_id``/``trial``, repeated runs and runs the adapter refuses are listed in
    ``skipped``."""
    episodes: list[dict[str, Any]] = []
    trajectories: list[dict[str, Any]] = []
    sessions: list[dict[str, Any]] = []
    intents: dict[str, str] = {}
    tasks: dict[str, str] = {}
    skipped: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        if item.get("task_id") is None or item.get("trial") is None:
            skipped.append(f"item {index}: no task_id/trial")
            continue
        session = tau_session(
            item,
            tenant_id=tenant_id,
            namespace=namespace,
            started_at=start + timedelta(minutes=index),
        )
        if session["session_id"] in seen:
            skipped.append(f"item {index}: duplicate {session['session_id']}")
            continue
        seen.add(session["session_id"])
        enrich = _enricher(session, condition_rules, max_text_chars, max_observations)
        try:
            adapted = adapt_session(index + 1, session, TranscriptFormat.openai_chat, enrich=enrich)
        except TranscriptError as exc:
            skipped.append(f"item {index}: {exc}")
            continue
        sessions.append(session)
        episodes += adapted.episodes
        for episode in adapted.episodes:
            tasks[episode["episode_id"]] = str(item["task_id"])
        if adapted.trajectory is not None:
            trajectories.append(adapted.trajectory)
            intents[adapted.trajectory["episode_id"]] = intent_label(item)
    return TauConversion(episodes, intents, tasks, skipped, trajectories, sessions)
