"""The promotion plan: pending writes of one table in one commit, resolved row by row.

A public class with its own methods because three modules work on it: the commit
(``stage.py``) fills it candidate by candidate, lineage (``rows.lineage_for``) reads what it
will insert, and canaries (``hold_back_canaries``) turn supersessions into trial versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory_core.lifecycle import CURRENT
from memory_core.stages.promote.supersede import (
    Resolution,
    Verdict,
    fact_key,
    procedure_key,
    resolve,
    row_hash,
    superseded_version,
)
from memory_core.stores import Stores
from memory_core.stores.facts import current_rows

__all__ = ["PromotionPlan"]


@dataclass
class PromotionPlan:
    """Pending writes of one table; rows are keyed by id so a row made in this commit and
    superseded in the same commit is written once, in its final form."""

    table: str
    current: dict[Any, dict[str, Any]]
    close: dict[str, dict[str, Any]] = field(default_factory=dict)
    insert: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcome: dict[str, tuple[Resolution, str | None]] = field(default_factory=dict)
    superseded: dict[str, str] = field(default_factory=dict)  # old row id -> new row id
    versions: dict[str, str] = field(default_factory=dict)  # superseded version -> old row id

    def apply(
        self, cid: str, key: Any, row: dict[str, Any], *, now: datetime, force: bool
    ) -> Resolution:
        id_col = "fact_id" if self.table == "facts" else "procedure_id"
        old = self.current.get(key)
        res = resolve(self.table, old, row, force=force)
        if res.verdict is Verdict.unchanged:
            assert old is not None
            self.outcome[cid] = (res, old[id_col])
            return res
        if res.verdict is Verdict.conflict:
            self.outcome[cid] = (res, None)
            return res
        if res.verdict is Verdict.supersede:
            assert old is not None
            closed, version = superseded_version(
                self.table, old, now=now, valid_to=row["valid_from"], superseded_by=row[id_col]
            )
            if old[id_col] in self.insert:  # made in this commit: never current to anyone
                self.insert[old[id_col]] = closed
            else:
                self.close[old[id_col]] = closed
            self.insert[version[id_col]] = version
            self.superseded[old[id_col]] = row[id_col]
            self.versions[version[id_col]] = old[id_col]
            row["supersedes"] = version[id_col]
            row["content_hash"] = row_hash(self.table, row)
        self.insert[row[id_col]] = row
        self.current[key] = row
        self.outcome[cid] = (res, row[id_col])
        return res

    @classmethod
    def for_rows(cls, stores: Stores, table: str, rows: Sequence[dict[str, Any]]) -> PromotionPlan:
        """A plan for ``table`` starting from the current rows the new ``rows`` would meet."""
        return cls(table, _load_current(stores, table, rows))

    def hold_back_canaries(self) -> list[str]:
        """Turn procedure supersessions into canaries; return the canary row ids.

        With ``staleness.canary_fraction`` > 0 a new version of a procedure that has an active
        version does not supersede it at once: the new row is written with status ``canary``
        and ``supersedes`` pointing at the stable row, which stays active
        (``stages/staleness/canary.py`` judges it later).
        """
        held = []
        for old_id, new_id in sorted(self.superseded.items()):
            if old_id in self.insert or new_id not in self.insert:
                continue  # made in this commit: nobody was ever served it
            for version_id, source in list(self.versions.items()):
                if source == old_id:
                    self.versions.pop(version_id)
                    self.insert.pop(version_id, None)
            self.close.pop(old_id, None)
            self.superseded.pop(old_id)
            row = self.insert[new_id]
            row["status"] = "canary"
            row["supersedes"] = old_id
            row["content_hash"] = row_hash("procedures", row)
            held.append(new_id)
        return held


def _load_current(stores: Stores, table: str, rows: Sequence[dict[str, Any]]) -> dict[Any, Any]:
    key_of = fact_key if table == "facts" else procedure_key
    column = "predicate" if table == "facts" else "name"
    out: dict[Any, dict[str, Any]] = {}
    scopes: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        scopes.setdefault((row["tenant_id"], row["namespace"]), set()).add(row[column])
    for (tenant, namespace), values in sorted(scopes.items()):
        for row in current_rows(
            stores.lance, table, tenant_id=tenant, namespace=namespace, column=column,
            values=values, status=None,
        ):  # fmt: skip
            # a contested or stale fact is still the current one: a new statement that meets
            # the bar supersedes it as it would an active one (stages/staleness)
            if row["status"] in CURRENT:
                out[key_of(row)] = row
    return out
