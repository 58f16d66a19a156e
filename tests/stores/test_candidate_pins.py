"""A mined candidate's evidence pins may live in ``candidate_evidence`` instead of its body
(``stores/candidates.PINS_IN_EVIDENCE``): whichever way each version was written, and from a
store whose evidence rows predate the pins' content hash column, every reader returns the
same candidate as one whose body lists its pins (one per cited episode, by episode id)."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.config import load_settings
from memory_core.models import (
    Authority,
    Candidate,
    CandidateKind,
    CandidateStatus,
    ProcedureSpec,
    Provenance,
)
from memory_core.stores import open_stores
from memory_core.stores.candidates import (
    PINS_IN_EVIDENCE,
    episode_pins,
    get_candidates,
    list_candidates,
    support_pin_subjects,
    upsert_candidates,
)
from memory_core.stores.derived import candidates_citing
from memory_core.stores.meta import MetaStore

NOW = datetime(2026, 7, 1, tzinfo=UTC)
EPISODES = [f"e{i}" for i in range(7)]
# an episode's pin never changes (episodes are immutable): its content hash and subject
BY_EPISODE = {e: (f"h-{e}", None if i == 3 else f"u{i % 3}") for i, e in enumerate(EPISODES)}
PINS = episode_pins(BY_EPISODE)

# one write of one candidate: each episode's role (None = not cited), and whether the pins
# go to candidate_evidence (as the miner writes) or into the body (as before)
write = st.tuples(
    st.lists(
        st.sampled_from([None, "support", "counterexample"]),
        min_size=len(EPISODES),
        max_size=len(EPISODES),
    ),
    st.booleans(),
)


def _candidate(cid: str, roles: list[str | None], *, pinned: bool) -> Candidate:
    support = [e for e, role in zip(EPISODES, roles, strict=True) if role == "support"]
    counter = [e for e, role in zip(EPISODES, roles, strict=True) if role == "counterexample"]
    cited = sorted({*support, *counter})
    pins = [
        Provenance(source_id=e, content_hash=BY_EPISODE[e][0], subject_id=BY_EPISODE[e][1])
        for e in cited
    ]
    return Candidate(
        candidate_id=cid, kind=CandidateKind.procedural, tenant_id="acme", subject_id=None,
        namespace="it", procedure=ProcedureSpec(name="n", steps=["a", "b"]), support_ids=support,
        counterexample_ids=counter, confidence=0.5, status=CandidateStatus.pending_score,
        authority=Authority.none, text=f"{len(support)} of {len(cited)}",
        provenance=pins if pinned else [],
    )  # fmt: skip


def _legacy(meta: MetaStore) -> None:
    """As a store migrated from before the column: evidence of bodies with pins has no hash."""
    with meta.transaction() as con:
        con.execute(
            "UPDATE candidate_evidence SET content_hash = NULL WHERE candidate_id IN ("
            f"SELECT candidate_id FROM candidates WHERE body->>'$.provenance' <> "
            f"'{PINS_IN_EVIDENCE}')"
        )


def _bodies(meta: MetaStore) -> dict[str, dict]:
    with meta.connect() as con:
        rows = con.execute("SELECT candidate_id, body FROM candidates").fetchall()
    return {cid: json.loads(body) for cid, body in rows}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(st.tuples(write, write), min_size=1, max_size=4),
    legacy=st.booleans(),
)
def test_pins_read_the_same_wherever_they_are_stored(
    history: list[tuple[tuple[list[str | None], bool], tuple[list[str | None], bool]]],
    legacy: bool,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        meta = open_stores(load_settings(home=Path(tmp), embed={"model": "hash"})).meta
        for night, writes in enumerate(history):
            for cid, (roles, elsewhere) in zip(("c1", "c2"), writes, strict=True):
                cand = _candidate(cid, roles, pinned=not elsewhere)
                upsert_candidates(meta, [cand], run_id=f"r{night}", now=NOW,
                                  pins=PINS if elsewhere else None)  # fmt: skip
            if legacy and night == 0:
                _legacy(meta)
        # what every reader must return: the last versions with their pins in the body
        want = [
            _candidate(cid, w[0], pinned=True)
            for cid, w in zip(("c1", "c2"), history[-1], strict=True)
        ]
        wanted = {c.candidate_id: c for c in want if c.support_ids or c.counterexample_ids}
        stored = _bodies(meta)
        for cid, cand in wanted.items():
            body_pins = stored[cid]["provenance"]
            assert body_pins == PINS_IN_EVIDENCE or body_pins == [
                p.model_dump(mode="json") for p in cand.provenance
            ]
        got = {c.candidate_id: c for c in list_candidates(meta) if c.candidate_id in wanted}
        assert got == wanted
        assert {c.candidate_id: c for c in get_candidates(meta, sorted(wanted))} == wanted
        light = {c.candidate_id: c for c in list_candidates(meta, pins=False)}
        assert {cid: light[cid] for cid in wanted} == {
            cid: c.model_copy(update={"provenance": []}) for cid, c in wanted.items()
        }
        citing = {c.candidate_id: c for c in candidates_citing(meta, EPISODES)}
        assert citing == wanted
        subjects = support_pin_subjects(meta, sorted(wanted))
        for cid, cand in wanted.items():
            assert subjects[cid] == {BY_EPISODE[e][1] for e in cand.support_ids} - {None}


def test_a_cited_episode_without_a_pin_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    meta = open_stores(load_settings(home=tmp_path, embed={"model": "hash"})).meta
    cand = _candidate("c1", ["support", "support", None, None, None, None, "counterexample"],
                      pinned=False)  # fmt: skip
    partial = episode_pins({e: pin for e, pin in BY_EPISODE.items() if e != "e6"})
    with pytest.raises(ValueError, match="candidate c1: cites episode e6 with no evidence pin"):
        upsert_candidates(meta, [cand], run_id="r", now=NOW, pins=partial)
    with meta.connect() as con:
        assert con.execute("SELECT count(*) FROM candidates").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM candidate_evidence").fetchone() == (0,)


def test_an_episode_pinned_twice_is_refused(tmp_path: Path) -> None:
    meta = open_stores(load_settings(home=tmp_path, embed={"model": "hash"})).meta
    cand = _candidate("c1", ["support"] * 3 + [None] * 4, pinned=False)
    twice = pa.concat_tables([PINS, PINS.slice(0, 1)])
    with pytest.raises(ValueError, match="an episode is pinned more than once"):
        upsert_candidates(meta, [cand], run_id="r", now=NOW, pins=twice)
    with meta.connect() as con:
        assert con.execute("SELECT count(*) FROM candidates").fetchone() == (0,)
