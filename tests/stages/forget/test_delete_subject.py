"""User deletion is complete: no version, table, index, cache or derived record keeps it."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from datetime import timedelta
from pathlib import Path

import lance
import pytest
from forget_rows import add_fact, add_procedure, prov
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.errors import PolicyRefused
from memory_core.stages.cluster import cluster_partition
from memory_core.stages.compact import compact_episodes
from memory_core.stages.forget import (
    carry_out_request,
    forget_episode,
    forget_subject,
    process_deletion_requests,
    request_deletion,
)
from memory_core.stages.mine import mine_partition
from memory_core.stores.candidates import list_candidates
from memory_core.stores.forgetting import SUBJECT_TABLES, unclassified_tables
from memory_core.stores.schemas import TABLES

SUBJECTS = ["ana", "ben", "cy"]
TENANTS = ["acme", "globex"]


def _lance_residue(mem, subject: str, tenant: str | None) -> list[tuple[str, int, int]]:
    """(table, version, rows) holding the subject in ANY version of any table, by time travel."""
    hits = []
    for name in TABLES:
        uri = mem.stores.lance.table(name).to_lance().uri
        for v in lance.dataset(uri).versions():
            rows = lance.dataset(uri, version=v["version"]).to_table().to_pylist()
            bad = [
                r for r in rows
                if (tenant is None or r["tenant_id"] == tenant)
                and (r["subject_id"] == subject
                     or any(p.get("subject_id") == subject for p in json.loads(r["provenance"] or "[]")))
            ]  # fmt: skip
            if bad:
                hits.append((name, v["version"], len(bad)))
    return hits


def _duckdb_residue(mem, subject: str, tenant: str | None) -> list[str]:
    quoted = json.dumps(subject)
    found = []
    with mem.stores.meta.connect() as con:
        tenant_of = dict(con.execute("SELECT candidate_id, tenant_id FROM candidates").fetchall())
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()]  # fmt: skip
        for table in tables:
            cols = con.execute(f'SELECT * FROM "{table}" LIMIT 0').description
            names = [c[0] for c in cols]
            for row in con.execute(f'SELECT * FROM "{table}"').fetchall():
                values = dict(zip(names, row, strict=True))
                owner = values.get("tenant_id") or tenant_of.get(values.get("candidate_id"))
                if tenant is not None and owner not in (None, tenant):
                    continue
                for value in values.values():
                    if isinstance(value, str) and (value == subject or quoted in value):
                        found.append(f"{table}: {value[:80]}")
    return found


def _world(home: Path, records: list[dict], *, compact: bool):
    from tests.stages.conftest import open_mem

    mem = open_mem(home, forget={"access_log_min_age_s": 0})
    mem.ingest(records)
    ctx = RunContext(now=NOW)
    for tenant in TENANTS:
        if any(r["tenant_id"] == tenant for r in records):
            part = Partition(tenant, "it")
            cluster_partition(mem.stores, mem.settings.cluster, ctx, part)
            mine_partition(mem.stores, mem.settings, ctx, part)
    st_ = mem.stores
    by_subject: dict[tuple[str, str], list[str]] = {}
    for r in records:
        by_subject.setdefault((r["tenant_id"], r["subject_id"]), []).append(r["episode_id"])
    for (tenant, subject), ids in sorted(by_subject.items()):
        add_fact(st_, f"F-{tenant}-{subject}", sources=prov(st_, ids[:2]), subject=subject,
                 tenant=tenant)  # fmt: skip
    for tenant in TENANTS:
        ids = [r["episode_id"] for r in records if r["tenant_id"] == tenant]
        if len(ids) >= 3:
            add_procedure(st_, f"P-{tenant}", sources=prov(st_, ids), tenant=tenant)
    log = mem.settings.home / "access_log"
    log.mkdir(parents=True, exist_ok=True)
    (log / "reads.jsonl").write_text("".join(
        json.dumps({"record_id": r["episode_id"], "table": "episodes", "tenant_id": r["tenant_id"],
                    "subject_id": r["subject_id"], "at": "2026-07-31T00:00:00Z"}) + "\n"
        for r in records
    ))  # fmt: skip
    if compact:
        compact_episodes(mem.stores, mem.settings, RunContext(now=NOW + timedelta(days=29)))
    return mem


NOW = None  # set from the kit below (conftest modules are not importable by name)


@pytest.fixture(autouse=True)
def _now(kit):
    global NOW
    NOW = kit.NOW


episode_st = st.fixed_dictionaries({
    "tenant_id": st.sampled_from(TENANTS),
    "subject_id": st.sampled_from(SUBJECTS),
    "outcome": st.sampled_from(["success", "failure"]),
    "goal": st.sampled_from(["VPN fails with error 720", "printer jam", "disk full"]),
    "day": st.integers(min_value=1, max_value=20),
})  # fmt: skip


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking store-backed cases is slow
)
@example(
    specs=[
        {"tenant_id": "acme", "subject_id": s, "outcome": "success", "goal": "disk full", "day": d}
        for s, d in (("ana", 1), ("ben", 2), ("cy", 3), ("ben", 4))
    ],
    victim="ben",
    scoped=True,
    compact=True,
)
@given(
    specs=st.lists(episode_st, min_size=3, max_size=10),
    victim=st.sampled_from(SUBJECTS),
    scoped=st.booleans(),
    compact=st.booleans(),
)
def test_deleted_subject_is_nowhere_and_others_untouched(kit, specs, victim, scoped, compact):
    records = [
        kit.make_episode(
            f"e{i}", tenant_id=s["tenant_id"], subject_id=s["subject_id"], outcome=s["outcome"],
            goal=s["goal"], occurred_at=f"2026-07-{s['day']:02d}T10:00:00Z",
            text=f"{s['subject_id']} worked on {s['goal']} ({i})",
        )
        for i, s in enumerate(specs)
    ]  # fmt: skip
    tenant = "acme" if scoped else None
    home = Path(tempfile.mkdtemp(prefix="forget-prop-"))
    try:
        mem = _world(home, records, compact=compact)
        others = {
            r["episode_id"]: r["content_hash"]
            for r in mem.stores.lance.scan("episodes", columns=["episode_id", "subject_id",
                                           "tenant_id", "content_hash"]).to_pylist()
            if not (r["subject_id"] == victim and (tenant is None or r["tenant_id"] == tenant))
        }  # fmt: skip
        receipt = forget_subject(mem.stores, mem.settings, RunContext(now=NOW), victim,
                                 tenant_id=tenant)  # fmt: skip
        assert receipt["verification"]["verified"], receipt["verification"]
        assert _lance_residue(mem, victim, tenant) == []
        assert _duckdb_residue(mem, victim, tenant) == []
        log = (mem.settings.home / "access_log" / "reads.jsonl").read_text()
        assert all(json.loads(x)["subject_id"] != victim or (tenant and json.loads(x)["tenant_id"] != tenant)
                   for x in log.splitlines())  # fmt: skip
        after = {
            r["episode_id"]: r["content_hash"]
            for r in mem.stores.lance.scan("episodes", columns=["episode_id", "content_hash"]).to_pylist()
        }  # fmt: skip
        assert after == others  # other subjects' episodes untouched
        # the receipt never names what it forgot (as a word: table names like "canaries" may
        # contain a short subject id such as "ana")
        assert not re.search(rf"\b{re.escape(victim)}\b", json.dumps(receipt))
        from memory_core.recall import recall

        for t in TENANTS if tenant is None else [tenant]:
            got = recall("VPN fails printer disk", tenant_id=t, subject_id=victim,
                         settings=mem.settings, embedder=HashEmbedder(384), access_log_dir=None)  # fmt: skip
            for rec in got.records:
                assert rec.get("subject_id") != victim
                assert f'"{victim}"' not in str(rec.get("provenance") or "")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_every_duckdb_table_says_how_it_holds_a_subject(stores):
    with stores.meta.connect() as con:
        assert unclassified_tables(con) == [], (
            "classify new tables in memory_core/stores/forgetting.py SUBJECT_TABLES"
        )
    assert all(rule.why for rule in SUBJECT_TABLES.values())


def test_forget_one_episode_rechecks_what_cites_it(mem, kit):
    mem.ingest(kit.seed_scenario())
    add_procedure(mem.stores, "P", sources=prov(mem.stores, ["ok0", "ok1", "ok2", "ok3"]))
    receipt = forget_episode(mem.stores, mem.settings, RunContext(now=kit.NOW), "ok1")
    assert receipt["verification"]["verified"] and receipt["lance_rows_deleted"] == {"episodes": 1}
    assert {c["id"]: c["action"] for c in receipt["derived_changed"]}["P"] == "sources_removed"
    assert mem.stores.lance.count("episodes", "episode_id = 'ok1'") == 0


def test_tagged_versions_are_refused_before_anything_is_written(tmp_path, kit):
    mem = kit.open_mem(tmp_path / "h")
    mem.ingest([kit.make_episode("e1", subject_id="zed")])
    ds = mem.stores.lance.table("episodes").to_lance()
    ds.tags.create("audit-2026", ds.version)
    with pytest.raises(PolicyRefused, match="tagged Lance versions would keep deleted rows"):
        forget_subject(mem.stores, mem.settings, RunContext(now=kit.NOW), "zed")
    assert mem.stores.lance.count("episodes", "subject_id = 'zed'") == 1
    mem2 = kit.open_mem(tmp_path / "h", forget={"drop_tags": True})
    receipt = forget_subject(mem2.stores, mem2.settings, RunContext(now=kit.NOW), "zed")
    assert receipt["tags_dropped"] == {"episodes": ["audit-2026"]}
    assert receipt["verification"]["verified"]


def test_queued_request_is_carried_out_once_and_hashed(mem, kit):
    mem.ingest([kit.make_episode("e1", subject_id="zed"), kit.make_episode("e2")])
    ctx = RunContext(now=kit.NOW)
    request_id = request_deletion(mem.stores, ctx, kind="subject", target="zed")
    assert request_deletion(mem.stores, ctx, kind="subject", target="zed") == request_id
    receipts = process_deletion_requests(mem.stores, mem.settings, ctx)
    assert [r["request_id"] for r in receipts] == [request_id]
    assert process_deletion_requests(mem.stores, mem.settings, ctx) == []
    with mem.stores.meta.connect() as con:
        target, status = con.execute(
            "SELECT target, status FROM deletion_requests WHERE request_id = ?", [request_id]
        ).fetchone()
    assert status == "done" and target.startswith("sha256:")
    assert mem.stores.lance.count("episodes") == 1


def test_the_deletion_loop_takes_one_step_per_request_and_a_repeated_step_does_nothing(mem, kit):
    """The library's loop is the flow's loop: ``carry_out`` is called once per pending user
    deletion; a step repeated after its receipt (a retried task) writes nothing."""
    mem.ingest([kit.make_episode("e1", subject_id="zed"), kit.make_episode("e2"),
                kit.make_episode("e3")])  # fmt: skip
    ctx = RunContext(now=kit.NOW)
    first = request_deletion(mem.stores, ctx, kind="subject", target="zed")
    second = request_deletion(mem.stores, ctx, kind="episode", target="e2")
    steps: list[str] = []

    def step(request_id: str) -> dict:
        steps.append(request_id)
        return carry_out_request(mem.stores, mem.settings, ctx, request_id)

    receipts = process_deletion_requests(mem.stores, mem.settings, ctx, carry_out=step)
    assert sorted(steps) == sorted([first, second])  # same request time: by request id
    assert [r["request_id"] for r in receipts] == steps
    assert mem.stores.lance.count("episodes") == 1
    with mem.stores.meta.connect() as con:
        before = con.execute("SELECT count(*) FROM receipts").fetchone()
    assert carry_out_request(mem.stores, mem.settings, ctx, first) == {
        "request_id": first,
        "skipped": True,
    }
    assert carry_out_request(mem.stores, mem.settings, ctx, "no-such-request")["skipped"]
    with mem.stores.meta.connect() as con:
        assert con.execute("SELECT count(*) FROM receipts").fetchone() == before


def test_tool_call_arguments_naming_the_subject_leave_no_candidate_behind(mem, kit):
    """A tenant-scope procedure mined from tool calls quotes their arguments in its analysis;
    deleting the user those calls were about leaves no candidate naming them."""
    victim = "zed_garcia_1905"
    runs = []
    # the victim's runs alone: the procedure fails min_subjects but stays a tenant-scope
    # candidate whose analysis quotes the calls' concrete arguments
    for i, who in enumerate([victim, victim, victim]):
        calls = [
            {"tool": "get_user_details", "args": {"user_id": who}},
            {"tool": "cancel_reservation", "args": {"reservation_id": f"R{i}X9Q"}},
        ]
        runs.append(
            kit.make_episode(
                f"run{i}", minutes=i, subject_id=who, goal="cancel my trip", actions=calls,
                conditions={"membership": "gold"},
            )
        )  # fmt: skip
    mem.ingest(runs)
    mem.consolidate()

    def naming_victim() -> int:
        """Candidates naming the victim: in the stored body, in what readers see (the evidence
        pins may live in candidate_evidence, stores/candidates.PINS_IN_EVIDENCE), or in an
        evidence row."""
        with mem.stores.meta.connect() as con:
            (n,) = con.execute(
                "SELECT count(*) FROM candidates WHERE contains(body, ?)", [victim]
            ).fetchone()
            (rows,) = con.execute(
                "SELECT count(*) FROM candidate_evidence WHERE contains(subject_id, ?) "
                "OR contains(episode_id, ?)",
                [victim, victim],
            ).fetchone()
        read = sum(victim in c.model_dump_json() for c in list_candidates(mem.stores.meta))
        return n + rows + read

    assert naming_victim() > 0  # the candidate pins the victim's runs, quoting the calls
    receipt = forget_subject(mem.stores, mem.settings, RunContext(now=kit.NOW), victim)
    assert naming_victim() == 0
    assert receipt["verification"]["verified"] is True, receipt["verification"]
