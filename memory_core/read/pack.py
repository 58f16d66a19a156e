"""After ranking: which procedures apply, what fits the token budget, and what the agent gets.

Procedures are served only in their latest approved version, and only when every precondition
holds for the state the caller passed; an older active version (a supersession still in
flight, or a data error) is left out with its reason rather than served twice. Packing is
greedy by score: a record that does not fit the remaining budget is skipped (and says so), and
a smaller one below it may still fit. One statement is not paid for twice: a fact whose every
evidence episode is already packed is skipped (the statements are served verbatim) unless it
carries a marker the turns do not (contested, conflict, stale); the budget goes to the next
record. The converse does not hold: an episode a packed fact rests on is still served when it
ranks in on its own, since the fact is a summary and the turn the statement itself (the
wording, names and figures an answer quotes; leaving the turn out for its summary lost answers
on LoCoMo that the turns held verbatim).
Every candidate leaves with a decision and a reason.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memory_core.models import pitfall_candidate_id
from memory_core.read.provenance import served_provenance
from memory_core.read.rank import Candidate, decode_json

__all__ = [
    "JSON_COLUMNS",
    "apply_procedure_rules",
    "display_text",
    "estimate_tokens",
    "evidence_episodes",
    "left_out_entries",
    "pack",
    "place_pitfalls",
    "to_record",
    "version_key",
]

JSON_COLUMNS = frozenset({"conditions", "preconditions", "provenance", "sources", "claims"})


def version_key(version: str) -> tuple[Any, ...]:
    """Order "1.10" after "1.9": numeric parts compare as numbers, the rest as text."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in re.split(r"[.\-+]", str(version))
    )


def _preconditions(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("preconditions")
    if not raw:
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {"<unreadable preconditions>": raw}
    return value if isinstance(value, dict) else {"<unreadable preconditions>": raw}


def _conditions(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("conditions")
    if not raw:
        return {}
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _contradicted(conditions: Mapping[str, Any], state: Mapping[str, str]) -> list[str]:
    """Conditions whose key the state names with a value they do not allow."""
    out = []
    for key, expected in sorted(conditions.items()):
        have = state.get(key)
        allowed = [str(v) for v in expected] if isinstance(expected, list) else [str(expected)]
        if have is not None and have not in allowed:
            out.append(f"{key}={'|'.join(allowed)} (state: {have})")
    return out


def _unmet(preconditions: Mapping[str, Any], state: Mapping[str, str]) -> list[str]:
    """Preconditions the state does not satisfy; a list value means any one of them."""
    unmet = []
    for key, expected in sorted(preconditions.items()):
        have = state.get(key)
        allowed = [str(v) for v in expected] if isinstance(expected, list) else [str(expected)]
        if have is None or have not in allowed:
            unmet.append(f"{key}={'|'.join(allowed)} (state: {have if have is not None else '-'})")
    return unmet


PITFALL_PREFIX = "pitfall:"


def is_pitfall(row: Mapping[str, Any]) -> bool:
    """A promoted failure lesson (``stages/mine.py``): its predicate is ``pitfall:<problem>``."""
    return str(row.get("predicate") or "").startswith(PITFALL_PREFIX)


def apply_procedure_rules(
    candidates: list[Candidate], state: Mapping[str, str], *, canary: bool = False
) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """Keep the latest version per (scope, name) whose preconditions all hold in ``state``,
    and the facts whose conditions ``state`` does not contradict.

    A ``canary`` version (on trial, stages/staleness/canary.py) competes only when the caller
    is in the canary cohort (``canary``); everyone else keeps the stable version. A fact is
    true under its conditions (``os=win11``): it is left out when the state gives one of
    those keys another value; a key the state does not name is no contradiction (a fact is
    not a recipe that needs its conditions checked before it can be followed).
    """
    keep: list[Candidate] = []
    dropped: list[tuple[Candidate, str]] = []
    latest: dict[tuple[Any, ...], Candidate] = {}
    for cand in candidates:
        if cand.table == "facts" and is_pitfall(cand.row):
            # a failure lesson applies where its conditions hold, not merely where nothing
            # contradicts them: "cancel fails when membership=basic" is noise to a gold member
            # and to an agent that stated nothing
            unmet = _unmet(_conditions(cand.row), state)
            if unmet:
                dropped.append((cand, "pitfall conditions not in state: " + "; ".join(unmet)))
                continue
            keep.append(cand)
            continue
        if cand.table == "facts" and state:
            conflicts = _contradicted(_conditions(cand.row), state)
            if conflicts:
                dropped.append((cand, "condition contradicts state: " + "; ".join(conflicts)))
                continue
        if cand.table != "procedures":
            keep.append(cand)
            continue
        row = cand.row
        if row.get("status") == "canary" and not canary:
            why = f"canary version {row.get('version')}: not this subject's cohort"
            dropped.append((cand, why))
            continue
        scope = (row.get("tenant_id"), row.get("subject_id"), row.get("namespace"), row["name"])
        rank = (version_key(row.get("version") or "0"), row.get("recorded_at"), cand.record_id)
        other = latest.get(scope)
        if other is None:
            latest[scope] = cand
            continue
        other_rank = (
            version_key(other.row.get("version") or "0"),
            other.row.get("recorded_at"),
            other.record_id,
        )
        newer, older = (cand, other) if rank > other_rank else (other, cand)
        latest[scope] = newer
        dropped.append((older, f"older version {older.row.get('version')} of {row['name']}"))
    for cand in latest.values():
        unmet = _unmet(_preconditions(cand.row), state)
        if unmet:
            dropped.append((cand, "precondition not met: " + "; ".join(unmet)))
        else:
            keep.append(cand)
    return keep, dropped


def display_text(table: str, row: Mapping[str, Any]) -> str:
    """What the agent reads: the row's text, or a rendering of its structured fields."""
    text = row.get("text")
    if isinstance(text, str) and text.strip():
        return text
    if table == "facts":
        return f"{row.get('predicate')}: {row.get('object')}"
    if table == "procedures":
        steps = "; ".join(row.get("steps") or [])
        return f"{row.get('name')} v{row.get('version')}: {steps}"
    if table == "episodes":
        return " ".join(str(p) for p in (row.get("goal"), row.get("outcome")) if p)
    return str(row.get("digest_id") or "")


def estimate_tokens(text: str, chars_per_token: float) -> int:
    """Tokenizer-free estimate: about four characters a token for English and code."""
    return max(1, math.ceil(len(text) / chars_per_token))


def pack(
    ranked: list[Candidate],
    *,
    k: int,
    budget_tokens: int,
    chars_per_token: float,
) -> tuple[list[Candidate], list[tuple[Candidate, str]], int]:
    """Greedy by score into ``budget_tokens``, at most ``k`` records; reasons for the rest."""
    chosen: list[Candidate] = []
    left: list[tuple[Candidate, str]] = []
    served: set[str] = set()  # episodes already packed
    used = 0
    for cand in ranked:
        tokens = estimate_tokens(display_text(cand.table, cand.row), chars_per_token)
        cand.row["_tokens"] = tokens
        cited = evidence_episodes(cand)
        if len(chosen) >= k:
            left.append((cand, f"below the top {k}"))
        elif cited and cited <= served and not _marked(cand):
            # every statement it rests on is already served verbatim: the budget goes further
            left.append((cand, "covered by its served evidence: " + ", ".join(sorted(cited))))
        elif used + tokens > budget_tokens:
            left.append((cand, f"over token budget (needs {tokens}, {budget_tokens - used} left)"))
        else:
            chosen.append(cand)
            used += tokens
            if cand.table == "episodes":
                served.add(cand.record_id)
    return chosen, left, used


def _marked(cand: Candidate) -> bool:
    """A fact that says more than its turns: contested, in conflict or stale (the agent must
    see the marker), so served evidence does not make it redundant."""
    return bool(cand.conflict_with) or cand.row.get("status") in ("contested", "stale")


def evidence_episodes(cand: Candidate) -> set[str]:
    """The episodes a fact rests on (its provenance); empty for anything else, or when a
    source is not an episode (a corpus document, another fact: not covered by turns)."""
    if cand.table != "facts":
        return set()
    provenance = decode_json(cand.row.get("provenance"))
    if not isinstance(provenance, list) or not provenance:
        return set()
    ids = set()
    for p in provenance:
        if not isinstance(p, dict) or p.get("source_kind", "episode") != "episode":
            return set()
        ids.add(str(p.get("source_id")))
    return ids


def _pitfall_key(row: Mapping[str, Any]) -> str | None:
    """The candidate id a pitfall of this procedure row would have (None: cannot tell)."""
    cand = row.get("candidate_id")
    if not cand or not row.get("tenant_id") or not row.get("namespace"):
        return None
    version = str(row.get("policy_version") or "")
    return pitfall_candidate_id(str(row["tenant_id"]), str(row["namespace"]), str(cand), version)


def place_pitfalls(chosen: list[Candidate]) -> list[Candidate]:
    """The served records with each pitfall moved right after the procedure it qualifies.

    A pitfall ("cancel_reservation failed 4 of 4 times when membership=basic") is a warning
    about one procedure's steps; served apart from it, an agent reads it as a free-floating
    fact. Mining names the pitfall after its procedure's candidate (``pitfall_candidate_id``),
    so the link is recomputed here from the procedure row, and the pitfall's ``row`` gets
    ``_qualifies`` (the procedure's id, shown as ``qualifies`` in the record). A pitfall whose
    procedure is not served keeps its place; nothing is added or dropped.
    """
    owner: dict[str, Candidate] = {}
    for cand in chosen:
        if cand.table == "procedures":
            key = _pitfall_key(cand.row)
            if key is not None:
                owner.setdefault(key, cand)
    attached: dict[str, list[Candidate]] = {}
    for cand in chosen:
        if cand.table == "facts" and is_pitfall(cand.row):
            proc = owner.get(str(cand.row.get("candidate_id") or ""))
            if proc is not None:
                cand.row["_qualifies"] = proc.record_id
                attached.setdefault(proc.record_id, []).append(cand)
    if not attached:
        return chosen
    moved = {id(c) for group in attached.values() for c in group}
    out: list[Candidate] = []
    for cand in chosen:
        if id(cand) in moved:
            continue
        out.append(cand)
        if cand.table == "procedures":
            out += attached.get(cand.record_id, [])
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


def to_record(cand: Candidate, memory_type: str) -> dict[str, Any]:
    """The contract shape: the table's columns without the vector, plus score and reason."""
    out: dict[str, Any] = {}
    for key, value in cand.row.items():
        if key == "vector" or key.startswith("_"):
            continue
        out[key] = decode_json(value) if key in JSON_COLUMNS else _jsonable(value)
    out["memory_type"] = memory_type
    out["table"] = cand.table
    out["record_id"] = cand.record_id
    out["score"] = cand.score
    out["reason"] = cand.reason
    out["score_components"] = cand.components
    out["tokens"] = cand.row.get("_tokens")
    out["conflict"] = bool(cand.conflict_with) or cand.row.get("status") == "contested"
    out["stale"] = cand.row.get("status") == "stale"
    if cand.row.get("_qualifies"):
        out["qualifies"] = cand.row["_qualifies"]  # the procedure this pitfall warns about
    if cand.conflict_with:
        out["conflict_with"] = cand.conflict_with
    return served_provenance(out)


def left_out_entries(
    dropped: list[tuple[Candidate, str]], left: list[tuple[Candidate, str]]
) -> list[dict[str, Any]]:
    """The query record's ``left_out``: every candidate not served, with its reason.

    ``dropped`` were removed before ranking (procedure rules: no score); ``left`` were ranked
    and did not fit (k or the token budget).
    """
    out = [
        {"record_id": c.record_id, "table": c.table, "score": None, "reason": r} for c, r in dropped
    ]
    out += [
        {"record_id": c.record_id, "table": c.table, "score": c.score, "reason": r} for c, r in left
    ]
    return out
