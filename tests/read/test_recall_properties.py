"""Invariants of the read path, whatever the rows and the query.

1. The compiled Lance prefilter and the Python statement of the same rules agree on every row
   (so the oracle below is the filter, not a second opinion).
2. No result belongs to another tenant, or to another subject outside the tenant scope, and
   nothing expired, superseded, revoked, deleted or compacted is served for the present,
   whatever the query text (quotes, SQL, identifiers; an empty one is refused).
3. An as-of query returns the version of a fact that was valid at that time, and only it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memory_core.config import RecallConfig
from memory_core.embed import HashEmbedder
from memory_core.read.filters import FilterSpec, compile_where, why_excluded
from memory_core.read.indexes import ensure_fts
from memory_core.recall import Recaller
from memory_core.stores.lance import LanceStore
from tests.recall_rows import T0, make_row, write_rows

EMB = HashEmbedder(32)
NOW = datetime(2026, 8, 1, tzinfo=UTC)
TENANTS = ["acme", "glo'bex", "initech"]
SUBJECTS = [None, "u1", "u2", "o'brien"]
STATUSES = [
    "active",
    "active",
    "active",
    "expired",
    "superseded",
    "revoked",
    "deleted",
    "compacted",
    "stale",
    "contested",
    "deprecated",
]
RETIRED = {"expired", "superseded", "revoked", "deleted", "compacted", "deprecated"}
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

days = st.integers(min_value=-40, max_value=60).map(lambda d: T0 + timedelta(days=d))
maybe_days = st.none() | days


def rows(rnd: random.Random, spec: FilterSpec, n: int) -> list[dict]:
    """Rows near the boundary of ``spec``: each rule passes about 9 times in 10.

    Drawn from a Random that Hypothesis seeds (hypothesis' own choices favour boundary values,
    which here would fail the first rule almost always and leave the others untested).
    """

    def pick(value: object, others: list) -> object:
        return value if rnd.random() < 0.85 else rnd.choice(others)

    def near(when: datetime, lo: int = -30, hi: int = 3) -> datetime:
        return when + timedelta(days=rnd.randint(lo, hi), hours=rnd.randint(0, 23))

    def maybe_later(when: datetime) -> datetime | None:
        return None if rnd.random() < 0.7 else when + timedelta(days=rnd.randint(0, 40))

    out = []
    for _ in range(n):
        valid_from = near(spec.valid_at)
        recorded_at = near(spec.known_at or spec.now)
        out.append(
            {
                "tenant_id": pick(spec.tenant_id, TENANTS),
                "subject_id": pick(spec.subject_id, SUBJECTS),
                "namespace": pick(spec.namespace or "it", ["it", "hr"]),
                "status": pick("active", STATUSES),
                "valid_from": valid_from,
                "valid_to": maybe_later(valid_from),
                "recorded_at": recorded_at,
                "recorded_to": maybe_later(recorded_at),
                "expires_at": None if rnd.random() < 0.7 else near(spec.now, -5, 5),
                "sensitivity": pick(
                    min(spec.sensitivity, default="low"), ["low", "medium", "high"]
                ),
                "purpose": pick(None, ["billing", "support"]),
                "authority": pick("human_approved", ["user_statement"]),
            }
        )
    return out


specs = st.builds(
    FilterSpec,
    tenant_id=st.sampled_from(TENANTS),
    subject_id=st.sampled_from(SUBJECTS),
    now=days,
    as_of=maybe_days,
    known_at=st.one_of(st.none(), st.none(), days),
    sensitivity=st.sampled_from([frozenset({"low", "medium"}), frozenset({"low"})])
    | st.frozensets(st.sampled_from(["low", "medium", "high"])),
    purpose=st.sampled_from([None, "billing"]),
    namespace=st.sampled_from([None, "it"]),
    include_stale=st.booleans(),
)


@pytest.fixture(scope="module")
def fresh_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("props")


@SETTINGS
@given(
    spec=specs,
    table=st.sampled_from(["facts", "procedures"]),
    rnd=st.randoms(use_true_random=False),
    n=st.integers(1, 30),
)
def test_compiled_filter_equals_the_python_rules(fresh_dir, spec, table, rnd, n):
    rows_ = rows(rnd, spec, n)
    store = LanceStore(str(fresh_dir / "lance"))
    store.ensure_tables(EMB.dim)
    store.delete(table, "true")
    made = [make_row(table, EMB, f"r{i}", **row) for i, row in enumerate(rows_)]
    write_rows(store, table, made)
    id_col = "fact_id" if table == "facts" else "procedure_id"
    got = set(
        store.scan(table, where=compile_where(spec, table), columns=[id_col])[id_col].to_pylist()
    )
    expected = {r[id_col] for r in made if why_excluded(r, spec, table) is None}
    assert got == expected


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Recaller, list[dict]]]:
    """300 facts over every tenant, subject and status, with full-text search on."""
    import random

    rnd = random.Random(7)
    store = LanceStore(str(tmp_path_factory.mktemp("world") / "lance"))
    store.ensure_tables(EMB.dim)
    words = ["vpn", "error", "720", "printer", "'; DROP TABLE facts; --", "ERR_42", "owner"]
    made = []
    for i in range(300):
        status = rnd.choice(STATUSES)
        made.append(
            make_row(
                "facts",
                EMB,
                f"f{i}",
                tenant_id=rnd.choice(TENANTS),
                subject_id=rnd.choice(SUBJECTS),
                status=status,
                valid_from=T0 - timedelta(days=rnd.randrange(0, 30)),
                valid_to=None if rnd.random() < 0.7 else T0 + timedelta(days=rnd.randrange(1, 60)),
                expires_at=None
                if rnd.random() < 0.8
                else T0 + timedelta(days=rnd.randrange(1, 60)),
                recorded_to=None if rnd.random() < 0.85 else T0,
                text=" ".join(rnd.choices(words, k=4)),
            )
        )
    write_rows(store, "facts", made)
    ensure_fts(store.table("facts"))
    reader = Recaller(store.uri, embedder=EMB, config=RecallConfig(candidates_per_table=300))
    yield reader, made
    reader.close()


@SETTINGS
@given(
    query=st.text(min_size=1, max_size=40).filter(str.strip)
    | st.sampled_from(["vpn error 720", "' OR 1=1 --", "ERR_42"]),
    tenant=st.sampled_from(TENANTS),
    subject=st.sampled_from(SUBJECTS),
    offset=st.integers(-20, 60),
    include_stale=st.booleans(),
)
@example(
    query="' OR tenant_id IS NOT NULL --",
    tenant="acme",
    subject="u1",
    offset=31,
    include_stale=True,
)
def test_results_stay_in_scope_and_never_retired(
    world, query, tenant, subject, offset, include_stale
):
    reader, made = world
    now = T0 + timedelta(days=offset)
    result = reader.recall(
        query,
        tenant_id=tenant,
        subject_id=subject,
        now=now,
        k=300,
        budget_tokens=100_000,
        include_stale=include_stale,
        sensitivity=["low", "medium", "high"],
    )
    by_id = {r["fact_id"]: r for r in made}
    for record in result.records:
        assert record["tenant_id"] == tenant
        assert record["subject_id"] in (None, subject)
        assert record["status"] not in RETIRED
        assert record["recorded_to"] is None
        row = by_id[record["record_id"]]
        assert row["expires_at"] is None or row["expires_at"] > now
        assert row["valid_to"] is None or row["valid_to"] > now
    # and nothing in scope that should have been served was lost
    spec = FilterSpec(
        tenant,
        subject,
        now=now,
        include_stale=include_stale,
        sensitivity=frozenset({"low", "medium", "high"}),
    )
    expected = {r["fact_id"] for r in made if why_excluded(r, spec, "facts") is None}
    assert {r["record_id"] for r in result.records} == expected


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, int | None]]:
    """Consecutive valid intervals [start, end) in days after T0 of one (subject, predicate)."""
    starts = sorted(draw(st.sets(st.integers(0, 50), min_size=1, max_size=5)))
    ends: list[int | None] = [*starts[1:], None]
    return list(zip(starts, ends, strict=True))


@pytest.fixture(scope="module")
def history_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LanceStore, Recaller]]:
    store = LanceStore(str(tmp_path_factory.mktemp("asof") / "lance"))
    store.ensure_tables(EMB.dim)
    with Recaller(store.uri, embedder=EMB) as reader:
        yield store, reader


@SETTINGS
@given(history=histories(), ask=st.integers(-5, 70))
@example(history=[(0, 10), (10, None)], ask=10)  # the boundary belongs to the new version
def test_as_of_returns_the_version_valid_then(history_store, history, ask):
    store, reader = history_store
    store.delete("facts", "true")
    made = []
    for i, (start, end) in enumerate(history):
        # versions superseded later carry status superseded and their valid_to (schemas.py)
        made.append(
            make_row(
                "facts",
                EMB,
                f"v{i}",
                predicate="owner",
                object=f"person {i}",
                text=f"the owner is person {i}",
                status="active" if end is None else "superseded",
                valid_from=T0 + timedelta(days=start),
                valid_to=None if end is None else T0 + timedelta(days=end),
            )
        )
    write_rows(store, "facts", made)
    now = T0 + timedelta(days=80)
    at = T0 + timedelta(days=ask)
    result = reader.recall("owner", tenant_id="acme", subject_id="u1", as_of=at, now=now)
    expected = [f"v{i}" for i, (s, e) in enumerate(history) if s <= ask and (e is None or ask < e)]
    assert [r["record_id"] for r in result] == expected
