"""Expiry: TTL then hard delete after grace, expires_at, purposes, decay and caps, access log."""

from __future__ import annotations

import json
from datetime import timedelta

from memory_core.context import RunContext
from memory_core.stages.forget import end_purpose, run_forgetting
from memory_core.stages.forget.expire import fold_access_log


def _statuses(mem) -> dict[str, str]:
    rows = mem.stores.lance.scan("episodes", columns=["episode_id", "status"]).to_pylist()
    return {r["episode_id"]: r["status"] for r in rows}


def _run(mem, now):
    return run_forgetting(mem.stores, mem.settings, RunContext(now=now))


def test_ttl_expires_at_once_and_deletes_after_grace(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h")
    old = kit.make_episode("old", occurred_at="2026-06-28T10:00:00Z")
    new = kit.make_episode("new", occurred_at="2026-07-25T10:00:00Z", goal="printer jam")
    mem.ingest([old, new])
    first = _run(mem, kit.NOW)
    assert first["expired"] == {"episodes": 1}
    assert _statuses(mem) == {"old": "expired", "new": "active"}
    rows = mem.stores.lance.scan("episodes", columns=["episode_id", "version"] if False else None)
    assert rows.num_rows == 2

    again = _run(mem, kit.NOW)  # a rerun with the same clock is a no-op
    assert again["expired"] == {} and again["deleted"] == {}
    assert _statuses(mem) == {"old": "expired", "new": "active"}

    assert _run(mem, kit.NOW + timedelta(days=6))["deleted"] == {}
    assert "old" in _statuses(mem)
    later = _run(mem, kit.NOW + timedelta(days=7, seconds=1))
    assert later["deleted"] == {"episodes": 1}
    assert _statuses(mem) == {"new": "active"}
    with mem.stores.meta.connect() as con:
        cached = con.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
    assert cached == 1  # the deleted episode's cached vector went with it
    assert later["maintenance"][0]["versions_purged"] >= 1


def test_row_past_ttl_and_grace_is_deleted_directly(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h")
    mem.ingest([kit.make_episode("ancient", occurred_at="2026-05-01T10:00:00Z")])
    receipt = _run(mem, kit.NOW)
    assert receipt["deleted"] == {"episodes": 1} and receipt["expired"] == {}


def test_own_expires_at_and_grace_counted_from_it(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h")
    ep = kit.make_episode(
        "e", occurred_at="2026-07-30T10:00:00Z", expires_at="2026-07-31T00:00:00Z"
    )
    mem.ingest([ep])
    _run(mem, kit.NOW)
    assert _statuses(mem) == {"e": "expired"}
    # grace (7 days) runs from the episode's own expires_at, not from the run
    assert _run(mem, kit.NOW + timedelta(days=6, hours=13))["deleted"] == {"episodes": 1}


def test_ending_a_purpose_expires_its_records_now_and_later(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h", forget={"purpose_ttl_days": {"billing": 3.0}})
    mem.ingest([
        kit.make_episode("s1", occurred_at="2026-07-30T10:00:00Z", purpose="support"),
        kit.make_episode("b1", occurred_at="2026-07-30T10:00:00Z", purpose="billing"),
        kit.make_episode("b2", occurred_at="2026-07-25T10:00:00Z", purpose="billing"),
        kit.make_episode("x1", occurred_at="2026-07-30T10:00:00Z", tenant_id="other",
                         purpose="support"),
    ])  # fmt: skip
    receipt = end_purpose(mem.stores, mem.settings, RunContext(now=kit.NOW), "support",
                          tenant_id="acme")  # fmt: skip
    assert receipt["expired"] == {"episodes": 1}
    assert _statuses(mem)["s1"] == "expired" and _statuses(mem)["x1"] == "active"
    mem.ingest([kit.make_episode("s2", occurred_at="2026-07-31T10:00:00Z", purpose="support")])
    _run(mem, kit.NOW)
    got = _statuses(mem)
    assert got["s2"] == "expired"  # stored for an ended purpose after it ended
    assert got["b2"] == "expired" and got["b1"] == "active"  # purpose TTL of 3 days
    assert got["x1"] == "active"


def test_cap_per_subject_keeps_accessed_and_important_first(tmp_path, kit):
    mem = kit.open_mem(
        tmp_path / "h",
        forget={"policies": {"*/episodic": {"max_per_subject": 2}}, "access_log_min_age_s": 0},
    )
    mem.ingest([
        kit.make_episode(f"e{i}", occurred_at=f"2026-07-2{i}T10:00:00Z", goal=f"goal {i}")
        for i in range(4)
    ])  # fmt: skip
    log = mem.settings.home / "access_log"
    log.mkdir(parents=True)
    line = {"record_id": "e0", "table": "episodes", "tenant_id": "acme", "subject_id": "u1",
            "at": "2026-07-31T10:00:00Z"}  # fmt: skip
    (log / "a.jsonl").write_text((json.dumps(line) + "\n") * 5)
    receipt = _run(mem, kit.NOW)
    assert receipt["access_log"]["reads"] == 5
    got = _statuses(mem)
    # e0 is the oldest but was read 5 times; e3 is the newest: e1 and e2 go
    assert got == {"e0": "active", "e1": "expired", "e2": "expired", "e3": "active"}


def test_decay_floor_expires_unused_unimportant_memories(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h", forget={"policies": {"*/episodic": {"decay_floor": 0.3}}})
    mem.ingest([
        kit.make_episode("fresh", occurred_at="2026-07-31T10:00:00Z"),
        kit.make_episode("stale", occurred_at="2026-07-05T10:00:00Z", goal="other thing"),
    ])  # fmt: skip
    _run(mem, kit.NOW)
    # stale: 0.5 importance x 0.5 ** (27 / 30) = 0.27 < 0.3; fresh: 0.5 x 0.5 ** (1 / 30) = 0.49
    assert _statuses(mem) == {"fresh": "active", "stale": "expired"}


def test_access_log_fold_is_idempotent(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h", forget={"access_log_min_age_s": 0})
    log = mem.settings.home / "access_log"
    log.mkdir(parents=True)
    reads = [{"record_id": "f1", "table": "facts", "tenant_id": "acme", "subject_id": None,
              "at": f"2026-07-3{i}T10:00:00Z"} for i in range(2)]  # fmt: skip
    (log / "r1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reads) + "not json\n")
    ctx = RunContext(now=kit.NOW)
    # simulate a crash after the fold committed but before the file was removed
    keep = (log / "r1.jsonl").read_bytes()
    assert fold_access_log(mem.stores, mem.settings, ctx) == {"files": 1, "reads": 2,
                                                             "bad_lines": 1}  # fmt: skip
    (log / "r1.jsonl").write_bytes(keep)
    assert fold_access_log(mem.stores, mem.settings, ctx)["reads"] == 0
    assert not (log / "r1.jsonl").exists()
    with mem.stores.meta.connect() as con:
        row = con.execute(
            "SELECT hits, last_access FROM access_stats WHERE record_id = 'f1'"
        ).fetchone()
    assert row[0] == 2 and row[1].isoformat().startswith("2026-07-31T10:00")
