"""Abstract steps: tool calls compared by what they do, not by the values they carried.

Why: two agents that cancel two different reservations did the same thing. Clustering and
mining therefore compare a tool call on its *signature*: the tool's name and its argument keys,
each value replaced by a variable named after its key (``cancel_reservation(reservation_id=
$reservation_id)``). A free-text action (contract v1) is its own signature, unchanged, so v1
homes (and the demo) mine exactly as before.

A procedure shows a constant only where the evidence says the value is fixed: over the calls
that share one signature, an argument whose observed values differ becomes a typed variable
(``$date`` kind ``date``, with up to :data:`MAX_EXAMPLES` concrete examples), and so does one
whose single value was seen from fewer than :data:`MIN_CONSTANT_SOURCES` independent sources
(runs, or subjects when the caller says who made each run); only values that many sources
gave are quoted, as the constant or as examples. An argument always given the same
value by several users is a constant of the procedure (``cabin=economy``); one user's four
attempts at one task agree on their own reservation id, dates and gift card because they are
one request, which is no evidence that the procedure fixes them (tau-bench: a flight-change
procedure showed ``search_onestop_flight(date=2024-05-24, destination=PHL, origin=ATL)`` and
one user's ``payment_id=gift_card_5634230`` as steps for every user of the tenant). Types are
inferred generically from the values and the key (ISO dates, amounts, ids, e-mail addresses,
short repeated words = enumerations), never from a list written for one data set.

Every step has one of three classes (:func:`step_class`, rules in
:class:`memory_core.config.StepsConfig`: explicit tool lists first, then name prefixes; each
namespace may override the tenant-wide defaults):

* ``read_only``: a lookup (``get_``, ``search_`` ...);
* ``control``: a hand-off or escalation (``transfer_to_human_agents``, ``escalate_...``). It
  passes the conversation on: it neither reads nor changes the data the task is about, and it
  is not how a goal is reached, so it is no part of a procedure's key (a run that changed a
  booking and then handed off did the same change as one that did not hand off), yet it is
  not a lookup either: a procedure shows it after its world-changing steps when most of its
  supporting runs ended with it, and clustering weighs it as fully as a change (what the agent
  could not do says what was asked);
* ``world_changing``: everything else, including every free-text (v1) action.

Mining keys a pattern on the world-changing steps (consecutive repeats collapsed: a retried
call is one step; a call the tool refused with an error is no step at all), so lookups that
differ from run to run do not split one procedure into many.

Examples
--------
>>> from memory_core.steps import ToolCall
>>> step_signature(ToolCall(tool="cancel_reservation", args={"reservation_id": "ZFA04Y"}))
'cancel_reservation(reservation_id=$reservation_id)'
>>> value_kind("date", "2024-05-20"), value_kind("amount", 120.5), value_kind("user_id", "mia_3668")
('date', 'amount', 'id')
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from memory_core.config import StepsConfig
from memory_core.steps import Step, ToolCall, as_step

__all__ = [
    "MAX_EXAMPLES",
    "MIN_CONSTANT_SOURCES",
    "AbstractStep",
    "Variable",
    "abstract_steps",
    "changes_world",
    "is_read_only",
    "pattern_of",
    "policy_steps",
    "step_class",
    "step_signature",
    "value_kind",
]

MAX_EXAMPLES = 3
# how many independent sources (runs, or subjects when known) must have given a value before a
# procedure quotes it, as a constant or as an example: one source agreeing with itself is no
# evidence, and its value is its own
MIN_CONSTANT_SOURCES = 2

StepClass = Literal["read_only", "control", "world_changing"]

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_TIME = re.compile(r"^\d{1,2}:\d{2}(:\d{2})?$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.IGNORECASE)
_MONEY = re.compile(r"^[$€£]\s?\d[\d,]*(\.\d+)?$|^\d[\d,]*(\.\d+)?\s?(usd|eur|gbp)$", re.I)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_WORD = re.compile(r"^[A-Za-z][A-Za-z _-]{0,30}$")
_MONEY_KEYS = ("amount", "price", "cost", "fee", "balance", "total", "refund", "payment")
_ID_KEYS = ("_id", "_number", "_code", "uuid", "_key")
# Examples end up in tenant-scope candidates that many users' runs support: values that name
# or reach a person (a user id, an e-mail, a name, free text) are never kept as examples, so a
# procedure never quotes one user to the others and forgetting a user leaves nothing there.
_PERSONAL_KEYS = (
    "user", "customer", "account", "member", "passenger", "person", "name", "email", "mail",
    "phone", "address", "owner", "subject", "patient", "client", "contact", "passport",
)  # fmt: skip
_UNSHAREABLE_KINDS = frozenset({"email", "text", "mixed", "object", "list"})


def _name(key: str) -> str:
    """A variable name from an argument key: lower snake case, ``$`` prefixed by callers."""
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_") or "value"


def value_kind(key: str, value: Any) -> str:
    """The kind of one argument value, from its shape and, for numbers and ids, its key.

    Kinds: bool, date, datetime, time, email, amount, number, id, word, text, list, object.
    ``word`` (a short alphabetic value) becomes ``enum`` at aggregate level when the values
    repeat (:func:`abstract_steps`).
    """
    low = key.lower()
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "amount" if any(k in low for k in _MONEY_KEYS) else "number"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    if value is None:
        return "null"
    text = str(value).strip()
    if _DATE.match(text):
        return "date"
    if _DATETIME.match(text):
        return "datetime"
    if _TIME.match(text):
        return "time"
    if _EMAIL.match(text):
        return "email"
    if _MONEY.match(text):
        return "amount"
    if _NUMBER.match(text):
        return "amount" if any(k in low for k in _MONEY_KEYS) else "number"
    if low == "id" or low.endswith(_ID_KEYS) or (re.search(r"\d", text) and " " not in text):
        return "id"
    if _WORD.match(text):
        return "word"
    return "text"


def step_signature(step: Step | dict[str, Any] | str) -> str:
    """What a step is compared on: ``tool(key=$key, ...)`` (keys sorted) or the free text."""
    if isinstance(step, str):
        return _stored(step)[2]
    step = as_step(step)
    return step if isinstance(step, str) else _call_signature(step)


@functools.lru_cache(maxsize=1 << 16)
def _stored(stored: str) -> tuple[Step, bool, str]:
    """A stored step decoded: (step, whether the tool refused it, its signature).

    Mining and clustering ask for the same stored steps over and over (support runs repeat
    action lists): decoding a tool call's JSON is the cost, so it is paid once per process.
    The step is a frozen ``ToolCall`` or a string, safe to share."""
    step = as_step(stored)
    if isinstance(step, str):
        return step, False, step
    return step, step.failed, _call_signature(step)


def _call_signature(step: ToolCall) -> str:
    args = ", ".join(f"{k}=${_name(k)}" for k in sorted(step.args))
    return f"{step.tool}({args})"


def _prefix_match(tool: str, prefixes: Iterable[str]) -> bool:
    low = tool.lower()
    return any(low.startswith(p.lower()) for p in prefixes)


def step_class(tool: str, config: StepsConfig, namespace: str | None = None) -> StepClass:
    """``read_only``, ``control`` or ``world_changing``: namespace override, then the explicit
    lists (world-changing, read-only, control), then prefixes (read-only before control).

    Free-text (v1) actions always change the world unless listed: a written-out action such
    as "restart service" is what the agent did, so it belongs to the pattern.
    """
    rules = config.for_namespace(namespace)
    if tool in rules.world_changing_tools:
        return "world_changing"
    if tool in rules.read_only_tools:
        return "read_only"
    if tool in rules.control_tools:
        return "control"
    if not re.fullmatch(r"[A-Za-z_][\w.\-]*", tool):
        return "world_changing"  # free text, not a tool name
    if _prefix_match(tool, rules.read_only_prefixes):
        return "read_only"
    if _prefix_match(tool, rules.control_prefixes):
        return "control"
    return "world_changing"


def is_read_only(tool: str, config: StepsConfig, namespace: str | None = None) -> bool:
    """Whether a tool only reads (a lookup)."""
    return step_class(tool, config, namespace) == "read_only"


def changes_world(tool: str, config: StepsConfig, namespace: str | None = None) -> bool:
    """Whether a tool is a world-changing step (neither a lookup nor a hand-off)."""
    return step_class(tool, config, namespace) == "world_changing"


def _collapse(items: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return tuple(out)


def pattern_of(
    actions: Sequence[str | Step] | None, config: StepsConfig, namespace: str | None = None
) -> tuple[str, ...]:
    """The mining key of an episode: its world-changing step signatures, repeats collapsed.

    A call the tool answered with an error (``ToolCall.failed``) is left out: it changed
    nothing, so a run whose only change was refused did the same as a run that changed
    nothing, and a retry that finally worked is one step.

    An episode whose every step is a lookup or a hand-off has the empty pattern ``()`` (it
    changed nothing: an answer, a refusal, an escalation); callers tell that apart from an
    episode without actions.
    """
    sigs = []
    for raw in actions or ():
        step = as_step(raw)
        if isinstance(step, ToolCall) and step.failed:
            continue  # the tool said no: the call changed nothing
        tool = step.tool if isinstance(step, ToolCall) else step
        if changes_world(tool, config, namespace):
            sigs.append(step_signature(step))
    return _collapse(sigs)


@dataclass
class Variable:
    """One argument of an abstract step: a typed variable, or a constant with its value."""

    key: str
    kind: str
    values: int
    examples: list[Any] = field(default_factory=list)
    constant: Any = None
    is_constant: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "kind": self.kind, "distinct_values": self.values}
        if self.is_constant:
            out["constant"] = self.constant
        else:
            out["variable"] = f"${_name(self.key)}"
            out["examples"] = self.examples
        return out


@dataclass
class AbstractStep:
    """A step signature seen in several calls, with its arguments abstracted over them."""

    signature: str
    tool: str
    read_only: bool
    calls: int
    variables: list[Variable] = field(default_factory=list)
    control: bool = False  # a hand-off/escalation: neither a lookup nor a change

    @property
    def changes_world(self) -> bool:
        return not self.read_only and not self.control

    def text(self) -> str:
        """``tool(key=$var, key=constant)``: what a procedure shows."""
        if not self.variables and "(" not in self.signature:
            return self.signature
        args = ", ".join(
            f"{v.key}={_const_text(v.constant)}" if v.is_constant else f"{v.key}=${_name(v.key)}"
            for v in self.variables
        )
        return f"{self.tool}({args})"

    def as_call(self) -> dict[str, Any]:
        """``{tool, args}`` with ``$var`` values (DESIGN.md contract v1.1)."""
        return {
            "tool": self.tool,
            "args": {
                v.key: (v.constant if v.is_constant else f"${_name(v.key)}") for v in self.variables
            },
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "text": self.text(),
            "read_only": self.read_only,
            **({"control": True} if self.control else {}),
            "calls": self.calls,
            "args": [v.as_dict() for v in self.variables],
        }


def _const_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _freeze(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _variable(
    key: str, values: list[tuple[Any, int]], sources_of: Callable[[str], int]
) -> Variable:
    """``values``: the argument's values and how many calls gave each (a value may repeat);
    ``sources_of(frozen)``: how many independent sources (``_Origins``) gave the value whose
    ``_freeze`` is ``frozen``.

    A value is shown to the tenant (as the constant, or as an example of a variable) only when
    ``MIN_CONSTANT_SOURCES`` sources gave it: one user's reservation id, gift card or dates
    are theirs, and a procedure that quoted them would show them to every other user and keep
    them after that user is forgotten."""
    distinct: dict[str, Any] = {}
    for value, _ in values:
        distinct.setdefault(_freeze(value), value)
    calls = sum(times for _, times in values)
    kinds = sorted({value_kind(key, v) for v in distinct.values()})
    kind = kinds[0] if len(kinds) == 1 else "mixed"
    if kind == "word":
        # a short word that recurs is an enumeration; all-different words are free values
        kind = "enum" if len(distinct) < calls else "text"
    shared = [v for frozen, v in sorted(distinct.items(), key=lambda kv: kv[0])
              if sources_of(frozen) >= MIN_CONSTANT_SOURCES]  # fmt: skip
    if len(distinct) == 1 and shared and not _names_a_person(key, kind):
        # always the same, from several sources: no evidence that it varies
        return Variable(key, kind, 1, [], shared[0], is_constant=True)
    # a person's id, address or words is never a constant of a tenant's procedure, nor is what
    # one source said (once, or each time it tried the same request)
    examples = shared[:MAX_EXAMPLES] if len(distinct) > 1 and _shareable(key, kind) else []
    return Variable(key, kind, len(distinct), examples)


def _names_a_person(key: str, kind: str) -> bool:
    low = key.lower()
    return kind == "email" or any(p in low for p in _PERSONAL_KEYS)


def _shareable(key: str, kind: str) -> bool:
    """Whether concrete values of this argument may be shown to every user of the tenant."""
    return kind not in _UNSHAREABLE_KINDS and not _names_a_person(key, kind)


def _distinct_runs(
    runs: Iterable[Sequence[str | Step] | None],
) -> list[tuple[Sequence[str | Step], int]]:
    """Each distinct action list once, with how many runs made it.

    Why: the supporting runs of a procedure mostly repeat a few action lists (stored steps are
    strings), so their steps are decoded once per list, not once per run. A list holding
    unhashable steps (dicts) is kept as its own entry. Callers only count and collect, so the
    order of the lists does not matter.
    """
    counts: dict[tuple[str | Step, ...], int] = {}
    out: list[tuple[Sequence[str | Step], int]] = []
    for actions in runs:
        key = tuple(actions or ())
        try:
            counts[key] = counts.get(key, 0) + 1
        except TypeError:  # a step given as a dict
            out.append((key, 1))
    return [*((key, n) for key, n in counts.items()), *out]


def _distinct_lists(
    runs: Iterable[Sequence[str | Step] | None], sources: Sequence[str | None] | None
) -> list[tuple[Sequence[str | Step], dict[Any, int], int]]:
    """Each distinct action list once: (the list, the sources that made it with their weight,
    how many runs made it).

    A source is ``("subject", id)`` with weight 1 when the run's subject is known; runs of an
    unknown subject (None, or no ``sources``) that made the same list are one source
    ``("run", list)`` weighing as many runs. A list holding unhashable steps (dicts) is an
    entry of its own. Why per list and not per run: the supporting runs of a procedure mostly
    repeat a few action lists, so each list's steps are decoded, and each tool call's argument
    values frozen, once per list; only the sets of sources grow with the runs (a 1% night at
    1M episodes called this for ~11k procedures of ~250 runs each, BENCHMARKS.md s44)."""
    runs = list(runs)
    if sources is not None and len(sources) != len(runs):
        msg = f"abstract_steps: {len(sources)} sources for {len(runs)} runs"
        raise ValueError(msg)
    found: dict[tuple[str | Step, ...], tuple[dict[Any, int], list[int]]] = {}
    alone: list[tuple[Sequence[str | Step], dict[Any, int], int]] = []
    for index, actions in enumerate(runs):
        source = sources[index] if sources is not None else None
        key = tuple(actions or ())
        try:
            entry = found.get(key)
        except TypeError:  # a step given as a dict
            token = ("subject", source) if source is not None else ("run", index)
            alone.append((key, {token: 1}, 1))
            continue
        if entry is None:
            entry = found[key] = ({}, [0])
        tokens, count = entry
        count[0] += 1
        if source is not None:
            tokens[("subject", source)] = 1
        else:
            tokens[("run", key)] = tokens.get(("run", key), 0) + 1
    return [*((key, tokens, count[0]) for key, (tokens, count) in found.items()), *alone]


class _Origins:
    """Which independent sources made the calls of one signature, by argument value.

    A source is a subject when the caller names who made each run, else the runs of an
    unknown subject that made one action list (weighing how many they are): how many sources
    agree on a value decides whether a procedure may show it as a constant
    (``MIN_CONSTANT_SOURCES``)."""

    def __init__(self) -> None:
        self.weight: dict[Any, int] = {}
        self.by_value: dict[tuple[str, str], set[Any]] = {}

    def add(self, call: ToolCall, sources: dict[Any, int]) -> None:
        self.weight.update(sources)
        for key, value in call.args.items():
            self.by_value.setdefault((key, _freeze(value)), set()).update(sources)

    def agreeing(self, key: str, frozen: str) -> int:
        """How many sources gave ``key`` the value whose ``_freeze`` is ``frozen``."""
        return sum(self.weight[s] for s in self.by_value.get((key, frozen), ()))


def abstract_steps(
    episodes_actions: Iterable[Sequence[str | Step]],
    config: StepsConfig,
    namespace: str | None = None,
    *,
    sources: Sequence[str | None] | None = None,
) -> dict[str, AbstractStep]:
    """Every signature seen in these episodes' actions, its arguments abstracted over all calls.

    ``sources``: who made each run (its subject id), in the order of ``episodes_actions``:
    runs of one subject then count as one source for a constant (module docstring); without
    it, or for a run whose subject is None, each run is a source of its own."""
    # per signature: each distinct step and how many calls made it
    calls: dict[str, list[tuple[Step, int]]] = {}
    refused: dict[str, list[tuple[Step, int]]] = {}  # calls the tool answered with an error
    origins: dict[bool, dict[str, _Origins]] = {False: {}, True: {}}
    for actions, made_by, times in _distinct_lists(episodes_actions, sources):
        for raw in actions:
            if isinstance(raw, str):
                step, failed, sig = _stored(raw)
            else:
                step = as_step(raw)
                failed = isinstance(step, ToolCall) and step.failed
                sig = step_signature(step)
            (refused if failed else calls).setdefault(sig, []).append((step, times))
            if isinstance(step, ToolCall):
                origins[failed].setdefault(sig, _Origins()).add(step, made_by)
    for sig, steps in refused.items():
        if sig not in calls:  # values are abstracted over the calls that worked
            calls[sig] = steps
            origins[False][sig] = origins[True][sig]  # a refused step is a tool call
    out: dict[str, AbstractStep] = {}
    for sig, steps in sorted(calls.items()):
        first = steps[0][0]
        made = sum(times for _, times in steps)
        if isinstance(first, str):
            kind = step_class(first, config, namespace)
            out[sig] = AbstractStep(sig, first, kind == "read_only", made,
                                    control=kind == "control")  # fmt: skip
            continue
        keys = sorted(first.args)
        seen = origins[False][sig]  # every tool call's signature was added above
        calls_made = [(s, times) for s, times in steps if isinstance(s, ToolCall)]
        variables = [
            _variable(
                k,
                [(s.args.get(k), times) for s, times in calls_made],
                functools.partial(seen.agreeing, k),
            )
            for k in keys
        ]
        kind = step_class(first.tool, config, namespace)
        out[sig] = AbstractStep(sig, first.tool, kind == "read_only", made, variables,
                                kind == "control")  # fmt: skip
    return out


def policy_steps(
    pattern: Sequence[str],
    abstract: dict[str, AbstractStep],
    support_actions: Sequence[Sequence[str | Step]],
    config: StepsConfig,
    namespace: str | None = None,
) -> list[AbstractStep]:
    """The steps a procedure shows: common lookups first, then the pattern's steps in order,
    then common hand-offs.

    A lookup or a hand-off (``control``) is shown when at least half of the supporting
    episodes made it (ordered by where it first appears on average); the world-changing steps
    are the pattern itself. A hand-off closes a run, so it comes last.
    """
    first_seen: dict[str, list[int]] = {}
    for actions, times in _distinct_runs(support_actions):
        seen: set[str] = set()
        for index, raw in enumerate(actions):
            sig = step_signature(raw)
            if sig in seen:
                continue
            seen.add(sig)
            first_seen.setdefault(sig, []).extend([index] * times)
    need = max(1, (len(support_actions) + 1) // 2)
    common = sorted(
        (sig for sig, where in first_seen.items() if sig in abstract and len(where) >= need),
        key=lambda sig: (sum(first_seen[sig]) / len(first_seen[sig]), sig),
    )
    shown = [abstract[sig] for sig in common if abstract[sig].read_only]
    for sig in pattern:
        step = abstract.get(sig)
        if step is None:  # a pattern step not in the support (cannot happen for real data)
            tool = sig.split("(", 1)[0]
            kind = step_class(tool, config, namespace)
            step = AbstractStep(sig, tool, kind == "read_only", 0, control=kind == "control")
        shown.append(step)
    shown += [abstract[sig] for sig in common if abstract[sig].control]
    return shown
