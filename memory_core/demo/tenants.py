"""The three demo tenants, their users, and which problems each tenant's agents meet.

``acme-it`` runs an IT-support agent, ``globex-dev`` a coding agent and ``initech`` both, so
one tenant holds two namespaces and the same subjects appear in both. ``initech`` meets some
of the same problems as the others (with fewer root causes): identical action patterns in two
tenants must still give two separate procedures, because nothing crosses tenants.
"""

from __future__ import annotations

import random

from memory_core.demo import coding, it_support
from memory_core.demo.scenario import TenantPlan

__all__ = ["NOISE", "PREFERENCES", "SHARED_SUBJECT", "build_tenants"]

NOISE: dict[str, dict[str, tuple[str, ...]]] = {
    it_support.NAMESPACE: it_support.NOISE,
    coding.NAMESPACE: coding.NOISE,
}

PREFERENCES: dict[str, dict[str, tuple[str, ...]]] = {
    it_support.NAMESPACE: it_support.PREFERENCES,
    coding.NAMESPACE: coding.PREFERENCES,
}

_FIRST = (
    "alice", "bruno", "chen", "dana", "elif", "farah", "gita", "hugo", "ines", "jonas",
    "kemal", "lena", "mateo", "nora", "omar", "priya", "quinn", "rosa", "sven", "tariq",
    "uma", "viktor", "wen", "yara",
)  # fmt: skip
_LAST = (
    "nguyen", "okafor", "schmidt", "garcia", "kowalski", "tanaka", "haddad", "silva",
    "mueller", "rossi", "novak", "jensen", "ibrahim", "moreau", "park", "costa",
)  # fmt: skip

# One user id exists in two tenants on purpose: their memories must never meet.
SHARED_SUBJECT = "jordan.lee"


def _subjects(rng: random.Random, count: int, *, shared: bool) -> tuple[str, ...]:
    names: list[str] = [SHARED_SUBJECT] if shared else []
    while len(names) < count:
        name = f"{rng.choice(_FIRST)}.{rng.choice(_LAST)}"
        if name not in names:
            names.append(name)
    rng.shuffle(names)
    return tuple(names)


def build_tenants(rng: random.Random) -> list[TenantPlan]:
    """The three demo tenants; subject lists are drawn from ``rng``."""
    acme = _subjects(rng, 12, shared=True)
    globex = _subjects(rng, 10, shared=False)
    initech = _subjects(rng, 13, shared=True)
    it_ns, code_ns = it_support.NAMESPACE, coding.NAMESPACE
    return [
        TenantPlan(
            tenant_id="acme-it",
            subjects=acme,
            problems=(
                it_support.VPN_720,
                it_support.PRINTER,
                it_support.DISK_FULL,
                it_support.OUTLOOK_SYNC,
            ),
            subject_namespace=dict.fromkeys(acme, it_ns),
        ),
        TenantPlan(
            tenant_id="globex-dev",
            subjects=globex,
            problems=(
                coding.FLAKY_TEST,
                coding.DEPENDENCY_CONFLICT,
                coding.SEGFAULT_BUILD,
                coding.MIGRATION_FAILURE,
            ),
            subject_namespace=dict.fromkeys(globex, code_ns),
        ),
        TenantPlan(
            tenant_id="initech",
            subjects=initech,
            problems=(
                it_support.ACCOUNT_LOCKOUT,
                it_support.VPN_720.subset("adapter_mismatch", "cert_expired"),
                it_support.PRINTER,
                coding.LINT_ERRORS,
                coding.FLAKY_TEST.subset("test_order_dependent", "uses_real_clock"),
                coding.DEPENDENCY_CONFLICT,
            ),
            subject_namespace={s: rng.choice((it_ns, code_ns)) for s in initech},
        ),
    ]
