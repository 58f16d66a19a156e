"""What a served record says about whose experience supports it.

A tenant-scope record (a procedure, a tenant-wide fact) rests on episodes of many subjects.
Its stored provenance names each source's subject, because forgetting and revocation walk it;
serving those names would tell one user who else had the same problem. So what leaves the
store (recall, ``memctl facts|procedures``) keeps the source ids and content hashes but, for a
record with no subject of its own, replaces the subjects by a count (``supporting_subjects``).
A subject-scope record only ever rests on its own subject's statements: it stays as stored.
"""

from __future__ import annotations

from typing import Any

__all__ = ["served_provenance"]


def served_provenance(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (JSON columns already decoded) as it may be served; changed in place."""
    provenance = record.get("provenance")
    if record.get("subject_id") or not isinstance(provenance, list):
        return record
    subjects = set()
    served = []
    for item in provenance:
        if isinstance(item, dict):
            if item.get("subject_id"):
                subjects.add(item["subject_id"])
            item = {k: v for k, v in item.items() if k != "subject_id"}
        served.append(item)
    record["provenance"] = served
    record["supporting_subjects"] = len(subjects)
    return record
