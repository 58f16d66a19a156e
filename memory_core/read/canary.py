"""Canary cohorts: which subjects a procedure version on trial is served to.

Deterministic by a hash of (tenant, subject): the same subject always lands on the same side,
so an agent does not flip between versions from one call to the next, and the pipeline can
count outcomes per version knowing who saw what. A caller without a subject (tenant scope)
gets the stable version. Pure and cheap: the read path calls it per query.
"""

from __future__ import annotations

import hashlib

__all__ = ["canary_bucket", "in_canary"]


def canary_bucket(tenant_id: str, subject_id: str) -> float:
    """A number in [0, 1) fixed for the subject."""
    digest = hashlib.sha256(f"{tenant_id}\x00{subject_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def in_canary(tenant_id: str, subject_id: str | None, fraction: float) -> bool:
    """True when the subject is among the ``fraction`` of subjects served canary versions."""
    if subject_id is None or fraction <= 0:
        return False
    return canary_bucket(tenant_id, subject_id) < fraction
