"""Procedure outcomes and canaries: failing versions roll back, canaries promote or roll back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from promote_kit import at, consolidate

from memory_core.context import RunContext
from memory_core.models import CandidateStatus
from memory_core.read.canary import in_canary
from memory_core.recall import Recaller
from memory_core.stages.promote import commit_candidates
from memory_core.stages.review import ItemEdit, ReviewRequest, build_review_batches, decide_batch
from memory_core.stages.staleness import run_staleness
from memory_core.stages.staleness.common import wilson_upper
from memory_core.stores.candidates import list_candidates
from memory_core.stores.facts import list_rows
from memory_core.stores.review import list_batches
from memory_core.stores.sources import canaries

NOW = at("2026-08-01T12:00:00Z")
LATER = at("2026-08-10T12:00:00Z")
NIGHT = at("2026-08-20T12:00:00Z")
LAST = at("2026-08-25T12:00:00Z")
ADAPTER = "error 720: reset network adapter, then reconnect vpn"
CERT = "error 720: renew certificate, then reconnect vpn"


def _two_versions(mem, kit):
    """v1 = reset the adapter; v2 = renew the certificate, approved under the same name."""
    mem.ingest(kit.seed_scenario())
    consolidate(mem, NOW)
    build_review_batches(mem.stores, mem.settings, RunContext(now=NOW))
    # the certificate failures also teach a pitfall, reviewed in a semantic batch of its own
    (batch,) = [b for b in list_batches(mem.stores.meta, status="open") if b.kind == "procedural"]
    procs = {c.procedure.name: c for c in list_candidates(mem.stores.meta, kind="procedural")}

    def decide(now, cid, **extra):
        request = ReviewRequest(decision="approve", reviewer="alice", items=[cid], **extra)
        decide_batch(mem.stores, mem.settings, RunContext(now=now), batch.batch_id, request,
                     embedder=mem.embedder)  # fmt: skip

    decide(NOW, procs[ADAPTER].candidate_id)
    cid = procs[CERT].candidate_id
    decide(LATER, cid, edits={cid: ItemEdit(name=ADAPTER)})
    return _versions(mem)


def _versions(mem):
    """Current rows per version (the latest status of each)."""
    out = {}
    for row in list_rows(mem.stores.lance, "procedures"):
        if row["status"] != "superseded" or row["version"] not in out:
            out[row["version"]] = row
    return out


def _report(kit, rows, outcomes, *, subject="ana", start=0):
    """Episodes that followed ``rows`` (a procedure version) with the given outcomes."""
    return [
        kit.make_episode(
            f"used{start + i}", minutes=5000 + start + i, subject_id=subject,
            procedure_id=rows["procedure_id"], procedure_version=rows["version"], outcome=out,
            conditions={**rows["preconditions"], "os": "windows-11"},
        )
        for i, out in enumerate(outcomes)
    ]  # fmt: skip


def _served(reader, subject, pre, now=NIGHT):
    got = reader.recall(
        "vpn error 720", tenant_id="acme", subject_id=subject, memory_type="procedural",
        now=now, state={k: str(v) for k, v in pre.items()},
    )  # fmt: skip
    return [(r["name"], r["version"]) for r in got.records]


def test_failing_version_is_rolled_back_to_the_previous_one_in_one_run(mem, kit):
    rows = _two_versions(mem, kit)
    v1, v2 = rows["1.0.0"], rows["2.0.0"]
    assert (v1["status"], v2["status"]) == ("superseded", "active")
    reader = Recaller.from_settings(mem.settings, embedder=mem.embedder, access_log=False)
    assert _served(reader, "ana", v2["preconditions"]) == [(ADAPTER, "2.0.0")]
    assert _served(reader, "ana", v1["preconditions"]) == []
    # outcomes outside v2's preconditions say nothing about it
    outside = _report(kit, v2, ["failure"] * 6, start=100)
    for ep in outside:
        ep["conditions"] = {"error_code": "720", "cert_expired": "false"}
    mixed = _report(kit, v2, ["failure", "failure", "success", "failure"])
    mem.ingest([*outside, *mixed], now=NIGHT)
    quiet = run_staleness(mem.stores, mem.settings, RunContext(now=NIGHT))
    assert quiet["outcomes"]["rolled_back"] == []  # 4 outcomes < outcome_min (5)
    mem.ingest(_report(kit, v2, ["failure"] * 3, start=4), now=NIGHT)
    done = run_staleness(mem.stores, mem.settings, RunContext(now=NIGHT))
    (receipt,) = done["outcomes"]["rolled_back"]
    assert receipt["version"] == "2.0.0" and receipt["restored_version"] == "1.0.0"
    assert receipt["evidence"]["outcomes"] == 7 and receipt["evidence"]["successes"] == 1
    assert receipt["evidence"]["upper_bound"] < 0.5
    after = _versions(mem)
    assert after["2.0.0"]["status"] == "deprecated" and after["1.0.0"]["status"] == "active"
    # the open reader serves the previous version now, and never the deprecated one
    assert _served(reader, "ana", v1["preconditions"]) == [(ADAPTER, "1.0.0")]
    assert _served(reader, "ana", v2["preconditions"]) == []
    with mem.stores.meta.connect() as con:
        (audit,) = con.execute(
            "SELECT target FROM audit_log WHERE action = 'procedure_rollback'"
        ).fetchall()
        (kind,) = con.execute(
            "SELECT kind FROM receipts WHERE receipt_id = ?", [receipt["receipt_id"]]
        ).fetchone()
    assert audit == (v2["procedure_id"],) and kind == "procedure_rollback"
    open_kinds = [b.kind for b in list_batches(mem.stores.meta, status="open")]
    assert [k for k in open_kinds if k != "semantic"] == ["failures"]
    # the rollback is not repeated
    assert (
        run_staleness(mem.stores, mem.settings, RunContext(now=NIGHT))["outcomes"]["rolled_back"]
        == []
    )
    # approving the changed steps again makes a new version; 2.0.0 stays the deprecated one
    (cert,) = [c for c in list_candidates(mem.stores.meta, kind="procedural")
               if c.procedure.steps[0] == "renew certificate"]  # fmt: skip
    again = cert.model_copy(
        update={"candidate_id": "cand_again", "status": CandidateStatus.approved,
                "procedure": cert.procedure.model_copy(update={"name": ADAPTER})}
    )  # fmt: skip
    commit_candidates(mem.stores, mem.settings, RunContext(now=LAST), [again], reviewer="bo")
    final = _versions(mem)
    assert final["3.0.0"]["status"] == "active" and final["2.0.0"]["status"] == "deprecated"
    assert _served(reader, "ana", v2["preconditions"], LAST) == [(ADAPTER, "3.0.0")]
    reader.close()


def _cohorts(fraction, n=200):
    subjects = [f"s{i}" for i in range(n)]
    inside = [s for s in subjects if in_canary("acme", s, fraction)]
    outside = [s for s in subjects if not in_canary("acme", s, fraction)]
    return inside, outside


@pytest.mark.parametrize("verdict", ["promote", "roll back"])
def test_canary_serves_a_cohort_then_promotes_or_rolls_back(tmp_path, kit, verdict):
    mem = kit.open_mem(tmp_path / "home", staleness={"canary_fraction": 0.5, "canary_successes": 3})
    rows = _two_versions(mem, kit)
    v1, v2 = rows["1.0.0"], rows["2.0.0"]
    assert (v1["status"], v2["status"]) == ("active", "canary")
    reader = Recaller.from_settings(mem.settings, embedder=mem.embedder, access_log=False)
    (inside, *_), (outside, *_) = _cohorts(0.5)
    assert _served(reader, inside, v2["preconditions"]) == [(ADAPTER, "2.0.0")]
    assert _served(reader, outside, v2["preconditions"]) == []
    assert _served(reader, outside, v1["preconditions"]) == [(ADAPTER, "1.0.0")]
    outcomes = ["success"] * 3 if verdict == "promote" else ["failure"] * 5
    mem.ingest(_report(kit, v2, outcomes, subject=inside), now=NIGHT)
    done = run_staleness(mem.stores, mem.settings, RunContext(now=NIGHT))
    after = _versions(mem)
    (canary,) = canaries(mem.stores.meta)
    if verdict == "promote":
        assert done["outcomes"]["canaries_promoted"][0]["promoted"] == v2["procedure_id"]
        assert after["2.0.0"]["status"] == "active" and after["1.0.0"]["status"] == "superseded"
        assert canary.status == "promoted"
        assert _served(reader, outside, v2["preconditions"]) == [(ADAPTER, "2.0.0")]
    else:
        assert done["outcomes"]["rolled_back"][0]["was"] == "canary"
        assert after["2.0.0"]["status"] == "deprecated" and after["1.0.0"]["status"] == "active"
        assert canary.status == "rolled_back"
        assert _served(reader, inside, v2["preconditions"]) == []
        assert _served(reader, inside, v1["preconditions"]) == [(ADAPTER, "1.0.0")]
    reader.close()


@given(fraction=st.floats(0, 1), more=st.floats(0, 1), subject=st.text(min_size=1, max_size=20))
def test_canary_cohort_is_deterministic_and_grows_with_the_fraction(fraction, more, subject):
    low, high = sorted([fraction, more])
    assert in_canary("acme", subject, low) == in_canary("acme", subject, low)
    assert not in_canary("acme", subject, low) or in_canary("acme", subject, high)
    assert not in_canary("acme", None, 1.0)  # tenant scope: always the stable version


def test_canary_fraction_is_roughly_kept():
    inside, _ = _cohorts(0.25, n=2000)
    assert 0.2 < len(inside) / 2000 < 0.3


@pytest.mark.parametrize(
    ("wins", "n", "below"),
    [(1, 5, False), (1, 7, True), (3, 5, False), (0, 4, True), (10, 20, False)],
)
def test_wilson_upper_bound(wins, n, below):
    upper = wilson_upper(wins, n, 1.645)
    assert wins / n <= upper <= 1
    assert (upper < 0.5) is below
