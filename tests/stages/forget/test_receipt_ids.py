"""Receipt and audit-event ids are where the action is: the stable id of its inputs.

Two homes given the same input and clock issue the same receipt ids and log the same audit
events, whatever their run ids; a repeated identical audit event is logged once.
"""

from __future__ import annotations

from datetime import timedelta

from memory_core.context import RunContext
from memory_core.stages.forget import forget_subject, revoke_source, run_forgetting
from memory_core.stores.audit import record_audit


def _history(mem) -> tuple[list[tuple], list[tuple]]:
    with mem.stores.meta.connect() as con:
        receipts = con.execute("SELECT receipt_id, kind FROM receipts ORDER BY 1").fetchall()
        events = con.execute("SELECT event_id, action, target FROM audit_log ORDER BY 1").fetchall()
    return receipts, events


def _act(mem, kit, run: str) -> list[str]:
    mem.ingest([kit.make_episode("e1", subject_id="zed"), kit.make_episode("e2"),
                kit.make_episode("e3", subject_id="ana")])  # fmt: skip
    later = kit.NOW + timedelta(days=1)
    return [
        forget_subject(mem.stores, mem.settings, RunContext(now=later, run_id=run), "zed")[
            "receipt_id"
        ],
        revoke_source(
            mem.stores, mem.settings, RunContext(now=later, run_id=run), "e3", reason="wrong"
        ).receipt["receipt_id"],
        run_forgetting(mem.stores, mem.settings, RunContext(now=later, run_id=run))["receipt_id"],
    ]


def test_same_input_and_clock_give_the_same_receipt_and_event_ids(tmp_path, kit):
    a, b = kit.open_mem(tmp_path / "a"), kit.open_mem(tmp_path / "b")
    ids_a, ids_b = _act(a, kit, "run_a"), _act(b, kit, "run_b")
    assert ids_a == ids_b
    assert len(set(ids_a)) == 3 and all(i.startswith("rcpt_") for i in ids_a)
    assert _history(a) == _history(b)
    receipts, events = _history(a)
    assert {r[0] for r in receipts} == set(ids_a)
    assert events


def test_an_identical_event_is_logged_once_and_another_clock_is_another_event(mem, kit):
    with mem.stores.meta.transaction() as con:
        first = record_audit(con, at=kit.NOW, action="probe", target="x", counts={"n": 1})
        again = record_audit(con, at=kit.NOW, action="probe", target="x", counts={"n": 1},
                             run_id="another_run")  # fmt: skip
        later = record_audit(con, at=kit.NOW + timedelta(seconds=1), action="probe", target="x",
                             counts={"n": 1})  # fmt: skip
        other = record_audit(con, at=kit.NOW, action="probe", target="x", counts={"n": 2})
    assert first == again
    assert len({first, later, other}) == 3
    with mem.stores.meta.connect() as con:
        (n,) = con.execute("SELECT count(*) FROM audit_log WHERE action = 'probe'").fetchone()
    assert n == 3


def test_a_second_pass_at_the_same_clock_that_did_work_keeps_its_own_receipt(mem, kit):
    """A pass at a clock is stored once (a rerun after a kill finds nothing left and stores
    nothing new); a later pass at the same clock that found work is stored beside it."""
    at = kit.NOW + timedelta(days=1)
    mem.ingest([kit.make_episode("e1", expires_at=(kit.NOW - timedelta(hours=1)).isoformat())])
    first = run_forgetting(mem.stores, mem.settings, RunContext(now=at, run_id="one"))
    assert first["expired"]  # the first pass expired e1
    again = run_forgetting(mem.stores, mem.settings, RunContext(now=at, run_id="two"))
    assert again["receipt_id"] == first["receipt_id"] and not again["expired"]
    mem.ingest([kit.make_episode("e2", expires_at=(kit.NOW - timedelta(hours=1)).isoformat())])
    later = run_forgetting(mem.stores, mem.settings, RunContext(now=at, run_id="three"))
    assert later["expired"] and later["receipt_id"] != first["receipt_id"]
    receipts, _ = _history(mem)
    assert sorted(r[0] for r in receipts if r[1] == "expire") == sorted(
        [first["receipt_id"], later["receipt_id"]]
    )
