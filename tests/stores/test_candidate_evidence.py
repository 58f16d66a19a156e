"""Candidate evidence is written as a difference: after any sequence of upserts a candidate's
evidence rows are exactly those its last version lists (support first, a counterexample only
if not support, the subject from its pins), as a fresh store would hold them."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.config import load_settings
from memory_core.models import (
    Authority,
    Candidate,
    CandidateKind,
    CandidateStatus,
    ClaimSpec,
    Provenance,
)
from memory_core.stores import open_stores
from memory_core.stores.candidates import (
    EpisodePins,
    episode_pins,
    set_candidate_status,
    upsert_candidate_groups,
    upsert_candidates,
)
from memory_core.stores.meta import MetaStore

NOW = datetime(2026, 7, 1, tzinfo=UTC)
EPISODES = [f"e{i}" for i in range(8)]

# one version of one candidate: each episode's role in it, None = not cited
version = st.lists(
    st.sampled_from([None, "support", "counterexample"]),
    min_size=len(EPISODES),
    max_size=len(EPISODES),
)


def _candidate(cid: str, cited: list[str | None]) -> Candidate:
    """A candidate citing ``EPISODES`` in these roles; an episode's subject is its own (the
    candidate's content hash leaves pins out: a pin's subject changes only with the episode)."""
    support = [e for e, role in zip(EPISODES, cited, strict=True) if role == "support"]
    counter = [e for e, role in zip(EPISODES, cited, strict=True) if role == "counterexample"]
    pins = [
        Provenance(source_id=e, subject_id=f"u{i % 3}")
        for i, (e, role) in enumerate(zip(EPISODES, cited, strict=True))
        if role
    ]
    return Candidate(
        candidate_id=cid, kind=CandidateKind.semantic, tenant_id="acme", subject_id=None,
        namespace="it", claim=ClaimSpec(predicate="p", object="o"), support_ids=support,
        counterexample_ids=counter, confidence=0.5, status=CandidateStatus.pending_score,
        authority=Authority.none, text=f"{len(support)} of {len(support) + len(counter)}",
        provenance=pins,
    )  # fmt: skip


def _evidence(home: Path) -> list[tuple[str, ...]]:
    meta = open_stores(load_settings(home=home, embed={"model": "hash"})).meta
    with meta.connect() as con:
        return con.execute(
            "SELECT * FROM candidate_evidence ORDER BY candidate_id, episode_id"
        ).fetchall()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(st.tuples(version, version), min_size=1, max_size=4))
def test_evidence_after_any_sequence_of_upserts_is_the_last_versions(
    history: list[tuple[list[str | None], list[str | None]]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        homes = Path(tmp) / "incremental", Path(tmp) / "fresh"
        meta = open_stores(load_settings(home=homes[0], embed={"model": "hash"})).meta
        for night, (one, two) in enumerate(history):
            cands = [_candidate("c1", one), _candidate("c2", two)]
            upsert_candidates(meta, cands, run_id=f"r{night}", now=NOW)
        fresh = open_stores(load_settings(home=homes[1], embed={"model": "hash"})).meta
        last = [_candidate("c1", history[-1][0]), _candidate("c2", history[-1][1])]
        upsert_candidates(fresh, last, run_id="r", now=NOW)
        assert _evidence(homes[0]) == _evidence(homes[1])


# a pin's content hash and subject per episode and night: the store must not keep a row because
# its (candidate, episode) is stored when the role, subject or hash it holds differ
pin_versions = st.lists(st.sampled_from(["a", "b"]), min_size=len(EPISODES),
                        max_size=len(EPISODES))  # fmt: skip


def _pinned(cid: str, cited: list[str | None], night: int) -> Candidate:
    """``_candidate`` whose pins go to ``candidate_evidence`` only (as the miner writes), its
    claim naming the night so that every night's version is written (an unchanged candidate
    is not: its content hash leaves the pins out)."""
    claim = ClaimSpec(predicate="p", object=f"o night {night}")
    return _candidate(cid, cited).model_copy(update={"provenance": [], "claim": claim})


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(st.tuples(version, pin_versions), min_size=2, max_size=4))
def test_pins_in_evidence_after_any_sequence_of_upserts_are_the_last_versions(
    history: list[tuple[list[str | None], list[str]]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        homes = Path(tmp) / "incremental", Path(tmp) / "fresh"
        meta = open_stores(load_settings(home=homes[0], embed={"model": "hash"})).meta

        def pins(variant: list[str]) -> EpisodePins:
            return episode_pins(
                {e: (f"h-{v}-{e}", f"u-{v}") for e, v in zip(EPISODES, variant, strict=True)}
            )

        for night, (cited, variant) in enumerate(history):
            upsert_candidates(meta, [_pinned("c1", cited, night)], run_id=f"r{night}", now=NOW,
                              pins=pins(variant))  # fmt: skip
        fresh = open_stores(load_settings(home=homes[1], embed={"model": "hash"})).meta
        cited, variant = history[-1]
        last = _pinned("c1", cited, len(history) - 1)
        upsert_candidates(fresh, [last], run_id="r", now=NOW, pins=pins(variant))
        assert _evidence(homes[0]) == _evidence(homes[1])


def _write_at_schema_9(meta: MetaStore, cand: Candidate) -> None:
    """``cand`` and its evidence rows as the upsert stored them at migration 9 (today's
    upsert writes columns later migrations add)."""
    from memory_core.stores.candidates import _evidence_table

    evidence = _evidence_table([cand])
    with meta.transaction() as con:
        con.execute(
            "INSERT INTO candidates (candidate_id, kind, tenant_id, subject_id, namespace, "
            "status, body, content_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [cand.candidate_id, cand.kind.value, cand.tenant_id, cand.subject_id,
             cand.namespace, cand.status.value, cand.model_dump_json(), cand.content_hash()],
        )  # fmt: skip
        con.register("old_evidence", evidence)
        con.execute("INSERT INTO candidate_evidence SELECT * FROM old_evidence")
        con.unregister("old_evidence")


def test_evidence_written_before_the_key_was_dropped_is_kept_and_rewritten_once() -> None:
    """Migration 10 copies ``candidate_evidence`` without its primary key: rows written before
    it are all still read, and a later upsert leaves one row per cited episode, as a fresh store
    holds them (the difference, not the key, keeps rows unique from then on)."""
    from memory_core.stores.meta import MetaStore

    first = ["support", "support", "counterexample", None, None, "support", None, None]
    later = ["support", None, "counterexample", "support", None, "support", None, "support"]
    with tempfile.TemporaryDirectory() as tmp:
        old = MetaStore(Path(tmp) / "old.duckdb")
        old.migrate(target=9)
        _write_at_schema_9(old, _candidate("c1", first))
        with old.connect() as con:
            before = con.execute("SELECT * FROM candidate_evidence ORDER BY ALL").fetchall()
        old.migrate()
        with old.connect() as con:
            after = con.execute("SELECT * FROM candidate_evidence ORDER BY ALL").fetchall()
        assert after == before and len(before) == 4
        upsert_candidates(old, [_candidate("c1", later)], run_id="r1", now=NOW)
        fresh = MetaStore(Path(tmp) / "fresh.duckdb")
        fresh.migrate()
        upsert_candidates(fresh, [_candidate("c1", later)], run_id="r", now=NOW)
        with old.connect() as a, fresh.connect() as b:
            query = "SELECT * FROM candidate_evidence ORDER BY ALL"
            assert a.execute(query).fetchall() == b.execute(query).fetchall()
            assert a.execute("SELECT count(*) FROM candidate_evidence").fetchone() == (5,)


def test_a_grown_candidate_keeps_its_stored_rows_and_appends_the_new_one() -> None:
    """The difference compares nulls as equal (a pin without content hash or subject is the
    same pin again): a candidate that only gained an episode keeps every stored row where it
    is (same row ids: nothing deleted and written again) and appends one row; one that lost
    an episode loses exactly that row."""
    first = ["support", "support", "counterexample", None, None, None, None, None]
    grown = ["support", "support", "counterexample", "support", None, None, None, None]
    shrunk = ["support", None, "counterexample", "support", None, None, None, None]
    with tempfile.TemporaryDirectory() as tmp:
        meta = MetaStore(Path(tmp) / "meta.duckdb")
        meta.migrate()
        query = "SELECT rowid, episode_id, role, subject_id, content_hash FROM candidate_evidence"

        def rows() -> set[tuple]:
            with meta.connect() as con:
                return set(con.execute(query).fetchall())

        def night(cited: list[str | None], n: int) -> None:
            cand = _candidate("c1", cited)
            pins = [p.model_copy(update={"subject_id": None}) if p.source_id == "e0" else p
                    for p in cand.provenance]  # fmt: skip
            cand = cand.model_copy(update={"provenance": pins})
            upsert_candidates(meta, [cand], run_id=f"r{n}", now=NOW)

        night(first, 0)
        before = rows()
        assert len(before) == 3 and all(r[4] is None for r in before)
        night(grown, 1)
        after = rows()
        assert before < after and {r[1] for r in after - before} == {"e3"}
        night(shrunk, 2)
        assert rows() == {r for r in after if r[1] != "e1"}


def _rows(meta: MetaStore) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with meta.connect() as con:
        return (
            con.execute("SELECT * FROM candidates ORDER BY candidate_id").fetchall(),
            con.execute(
                "SELECT * FROM candidate_evidence ORDER BY candidate_id, episode_id"
            ).fetchall(),
        )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(st.tuples(version, version, version, pin_versions), min_size=1, max_size=3),
    decided=st.booleans(),
)
def test_groups_upserted_together_store_and_count_what_one_call_per_group_does(
    history: list[tuple[list[str | None], list[str | None], list[str | None], list[str]]],
    decided: bool,
) -> None:
    """The process pool's writer upserts a commit group's partitions in one call: the same
    candidates, evidence rows and per-partition counts as one call per partition, night
    after night (an approved candidate's decision kept either way)."""
    with tempfile.TemporaryDirectory() as tmp:
        together = open_stores(load_settings(home=Path(tmp) / "a", embed={"model": "hash"})).meta
        apart = open_stores(load_settings(home=Path(tmp) / "b", embed={"model": "hash"})).meta

        def pins(variant: list[str]) -> EpisodePins:
            return episode_pins(
                {e: (f"h-{v}-{e}", f"u-{v}") for e, v in zip(EPISODES, variant, strict=True)}
            )

        for night, (one, two, three, variant) in enumerate(history):
            groups = {
                "it": [_pinned("c1", one, night), _candidate("c2", two)],
                "hr": [_pinned("c3", three, night)],
                "ops": [],
            }
            got = upsert_candidate_groups(together, groups, run_id=f"r{night}", now=NOW,
                                          pins=pins(variant))  # fmt: skip
            want = {key: upsert_candidates(apart, cands, run_id=f"r{night}", now=NOW,
                                           pins=pins(variant))
                    for key, cands in groups.items()}  # fmt: skip
            assert got == want
            if decided and night == 0:
                for meta in (together, apart):  # scored, then approved by a reviewer
                    for status in (CandidateStatus.pending_review, CandidateStatus.approved):
                        set_candidate_status(meta, {"c1": (status, "ok")}, now=NOW)
            assert _rows(together) == _rows(apart)
