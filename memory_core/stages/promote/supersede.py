"""Supersession and conflicts: pure rules over row dicts, no I/O.

A new record for the same key (a fact's tenant, namespace, subject, predicate and conditions; a
procedure's tenant, namespace and name) either

* says the same thing as the current one: nothing is written (``unchanged``);
* supersedes it: it starts later in valid time and its authority ranks equal or higher. The
  old row's transaction time is closed and a new version of it is inserted with ``valid_to`` =
  the new record's ``valid_from``, status ``superseded`` and ``superseded_by``; the new record
  gets ``supersedes`` = that version's id. Nothing is overwritten: the old belief stays
  queryable with ``--known-at``;
* or conflicts with it (earlier or equal valid time, or lower authority): nothing is written
  and both are held for a reviewer, who may resolve it with an explicit ``supersede`` edit.

Why conditions are part of a fact's key: "error 720 is resolved by resetting the adapter when
adapter_mismatch=true" and "... by renewing the certificate when cert_expired=true" are both
true; they answer different situations and must not retire each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from memory_core.models import Authority, Status, canonical_json, content_hash, stable_id

__all__ = [
    "Resolution",
    "Verdict",
    "fact_key",
    "next_version",
    "normalise",
    "procedure_key",
    "resolve",
    "row_hash",
    "superseded_version",
]

# Columns that say what a row means; its content hash covers these and nothing else.
_MEANING = {
    "facts": (
        "tenant_id", "namespace", "subject_id", "predicate", "object", "conditions",
        "valid_from", "valid_to", "status", "authority", "supersedes", "superseded_by",
    ),
    "procedures": (
        "tenant_id", "namespace", "name", "version", "steps", "preconditions", "effect",
        "rollback", "valid_from", "valid_to", "status", "authority", "supersedes",
        "superseded_by",
    ),
}  # fmt: skip


class Verdict(StrEnum):
    new = "new"
    unchanged = "unchanged"
    supersede = "supersede"
    conflict = "conflict"


@dataclass(frozen=True)
class Resolution:
    verdict: Verdict
    reason: str


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive form of an object: "Mina " equals "mina"."""
    return " ".join(text.split()).casefold()


def fact_key(row: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    conditions = row.get("conditions") or "{}"
    if not isinstance(conditions, str):
        conditions = canonical_json(conditions)
    return (
        row["tenant_id"],
        row["namespace"],
        row.get("subject_id") or "",
        row["predicate"],
        conditions,
    )


def procedure_key(row: Mapping[str, Any]) -> tuple[str, str, str]:
    return (row["tenant_id"], row["namespace"], normalise(row["name"]))


def _same(table: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    if table == "facts":
        return normalise(old["object"]) == normalise(new["object"])
    return list(old.get("steps") or []) == list(new.get("steps") or []) and all(
        old.get(k) == new.get(k) for k in ("preconditions", "effect", "rollback")
    )


def _rank(value: str) -> int:
    return Authority(value).rank


def resolve(
    table: str, old: Mapping[str, Any] | None, new: Mapping[str, Any], *, force: bool = False
) -> Resolution:
    """What a new record does to the current one of its key (see the module docstring).

    ``force`` is a reviewer's explicit resolution of a conflict in favour of the new record.
    """
    if old is None:
        return Resolution(Verdict.new, "nothing current for this key")
    if _same(table, old, new):
        return Resolution(Verdict.unchanged, f"same as current {_id(table, old)}")
    later = _time(new["valid_from"]) > _time(old["valid_from"])
    outranks = _rank(new["authority"]) >= _rank(old["authority"])
    if later and outranks:
        return Resolution(Verdict.supersede, f"later in valid time than {_id(table, old)}")
    if force:
        return Resolution(
            Verdict.supersede, f"reviewer resolved the conflict with {_id(table, old)}"
        )
    why = []
    if not later:
        why.append(
            f"not later in valid time ({_time(new['valid_from']).isoformat()} <= "
            f"{_time(old['valid_from']).isoformat()})"
        )
    if not outranks:
        why.append(f"lower authority ({new['authority']} < {old['authority']})")
    return Resolution(Verdict.conflict, f"conflicts with {_id(table, old)}: " + " and ".join(why))


def _id(table: str, row: Mapping[str, Any]) -> str:
    return str(row["fact_id" if table == "facts" else "procedure_id"])


def _time(value: Any) -> datetime:
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return value


def row_hash(table: str, row: Mapping[str, Any]) -> str:
    """Content hash of what a row version means (times as ISO strings)."""
    return content_hash({k: row.get(k) for k in _MEANING[table]})


def superseded_version(
    table: str,
    old: Mapping[str, Any],
    *,
    now: datetime,
    valid_to: datetime,
    superseded_by: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the old row with its transaction time closed, its new ``superseded`` version).

    The new version's id is derived from the old id and the commit time, so a rerun with the
    same clock writes the same row. ``valid_to`` never precedes ``valid_from``: a correction
    that starts earlier leaves an empty valid interval (it was never true, as we now know).
    """
    id_col = "fact_id" if table == "facts" else "procedure_id"
    closed = {**old, "recorded_to": now}
    start = _time(old["valid_from"]) if old.get("valid_from") is not None else valid_to
    version = {
        **old,
        id_col: stable_id(table[:4], old[id_col], "v", now.isoformat()),
        "valid_to": max(valid_to, start),
        "status": Status.superseded.value,
        "superseded_by": superseded_by,
        "recorded_at": now,
        "recorded_to": None,
    }
    version["content_hash"] = row_hash(table, version)
    return closed, version


def next_version(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str:
    """Semantic version of a procedure: 1.0.0 first; steps changed -> major; preconditions
    changed -> minor; only effect or rollback changed -> patch."""
    if old is None:
        return "1.0.0"
    try:
        major, minor, patch = (int(p) for p in str(old["version"]).split("."))
    except ValueError:
        major, minor, patch = 1, 0, 0
    if list(old.get("steps") or []) != list(new.get("steps") or []):
        return f"{major + 1}.0.0"
    if old.get("preconditions") != new.get("preconditions"):
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"
