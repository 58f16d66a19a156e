"""The nightly flow through a real (ephemeral) Prefect server, on real Lance + DuckDB."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flows.nightly import partition_batches, run_nightly
from memory_core.context import RunContext
from memory_core.eval.demo_truth import score_candidates_against_truth
from memory_core.stores.candidates import list_candidates
from memory_core.stores.schemas import TABLES
from tests.conftest import episode, lines_of

NOW = datetime(2026, 8, 1, tzinfo=UTC)


def _seed_scenario() -> list[str]:
    records = []
    for i, subject in enumerate(["ana", "ben", "cho", "dev"]):
        records.append(
            episode(
                episode_id=f"ok{i}",
                subject_id=subject,
                session_id=f"s-ok{i}",
                conditions={
                    "error_code": "720",
                    "adapter_mismatch": "true",
                    "os": ["win10", "win11"][i % 2],
                },
                occurred_at=f"2026-07-0{i + 1}T10:00:00Z",
            )
        )
    for i, subject in enumerate(["ana", "eve", "fay"]):
        records.append(
            episode(
                episode_id=f"cert{i}",
                subject_id=subject,
                session_id=f"s-cert{i}",
                outcome="failure",
                conditions={
                    "error_code": "720",
                    "adapter_mismatch": "false",
                    "cert_expired": "true",
                    "os": "win11",
                },
                occurred_at=f"2026-07-1{i}T10:00:00Z",
                text="Reset the adapter, VPN still fails with 720.",
            )
        )
    return lines_of(*records)


def _snapshot(stores) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in TABLES:
        out[f"lance.{name}"] = (stores.lance.version(name), stores.lance.count(name))
    with stores.meta.connect() as con:
        for table in (
            "clusters",
            "cluster_members",
            "candidates",
            "candidate_evidence",
            "lineage",
            "audit_log",
            "quarantine",
            "watermarks",
            "stage_ledger",
            "score_cache",
            "llm_ledger",
        ):
            out[table] = sorted(map(str, con.execute(f"SELECT * FROM {table}").fetchall()))
    return out


def test_seed_scenario_end_to_end_and_rerun_changes_nothing(ingest, stores, settings):
    episodes = _seed_scenario()
    written = ingest(episodes)
    assert written.pending_embedding == len(episodes)  # ingest did not wait for the model
    summary = run_nightly(settings, now=NOW)
    assert summary["partitions"] == 1 and summary["skipped"] == 0
    assert summary["embed"]["embedded"] == len(episodes)  # the nightly's first task
    assert stores.lance.count("episodes", "vector IS NULL") == 0
    procedural = [
        c
        for c in list_candidates(stores.meta, kind="procedural")
        if c.status.value != "auto_rejected"
    ]
    reset = [
        c for c in procedural if c.procedure.steps == ["reset network adapter", "reconnect vpn"]
    ]
    assert len(reset) == 1
    cand = reset[0]
    assert cand.procedure.preconditions.get("adapter_mismatch") == "true"
    assert set(cand.counterexample_ids) == {"cert0", "cert1", "cert2"}
    assert set(cand.support_ids) == {"ok0", "ok1", "ok2", "ok3"}
    assert cand.status.value == "pending_review"  # scored (heuristic: no API key in tests)
    assert cand.scorer == "heuristic"
    for c in procedural:
        assert (
            "adapter_mismatch" in c.procedure.preconditions
            or "cert_expired" in c.procedure.preconditions
        )

    before = _snapshot(stores)
    again = run_nightly(settings, now=NOW)
    assert again["skipped"] == again["partitions"] == 1
    assert again["embed"]["embedded"] == 0
    assert _snapshot(stores) == before
    with stores.meta.connect() as con:
        runs = con.execute("SELECT status, summary FROM runs ORDER BY started_at").fetchall()
    assert [r[0] for r in runs] == ["completed", "completed"]
    assert json.loads(runs[1][1])["results"][0]["skipped"] is True


def test_one_success_alone_yields_no_candidate(ingest, stores, settings):
    ingest(_seed_scenario()[:1])
    run_nightly(settings, now=NOW)
    passing = [
        c
        for c in list_candidates(stores.meta, kind="procedural")
        if c.status.value != "auto_rejected"
    ]
    assert passing == []
    rejected = list_candidates(stores.meta, status="auto_rejected")
    assert all("min_support" in c.reason for c in rejected)


def test_new_episodes_after_watermark_are_consolidated(ingest, stores, settings):
    lines = _seed_scenario()
    ingest(lines[:2])
    run_nightly(settings, now=NOW)
    assert not [
        c
        for c in list_candidates(stores.meta, kind="procedural")
        if c.status.value == "pending_review"
    ]
    ingest(lines[2:], now=datetime(2026, 8, 2, tzinfo=UTC))
    summary = run_nightly(settings, now=datetime(2026, 8, 2, 1, tzinfo=UTC))
    assert summary["skipped"] == 0
    assert [
        c
        for c in list_candidates(stores.meta, kind="procedural")
        if c.status.value == "pending_review"
    ]


@pytest.mark.slow
def test_demo_candidate_precision_and_recall(ingest, stores, settings):
    from memory_core.demo import generate_demo

    data = generate_demo(seed=11)
    ingest([json.dumps(e) for e in data.episodes])
    run_nightly(settings, now=NOW)
    quality = score_candidates_against_truth(list_candidates(stores.meta), data.truth)
    assert quality["precision"] >= 0.9, quality
    assert quality["recall"] >= 0.8, quality


def test_flow_publishes_artifacts(ingest, settings, stores, monkeypatch):
    """The candidates table lists at most ``ARTIFACT_ROWS`` (a 1M first night's ~15k rows
    were one event Prefect refused to publish) and says how many there were."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    import flows.nightly

    monkeypatch.setattr(flows.nightly, "ARTIFACT_ROWS", 2)
    ingest(_seed_scenario())
    summary = run_nightly(settings, now=NOW)
    with stores.meta.connect() as con:
        (changed,) = con.execute(
            "SELECT count(*) FROM candidates WHERE run_id = ?", [summary["run_id"]]
        ).fetchone()
    assert changed > 2

    async def read():
        """This test's run's artifacts: the harness server holds other tests' runs too."""
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=["nightly-candidates", "nightly-summary"])
                ),
                sort=ArtifactSort.CREATED_DESC,  # ours first, whatever the server's page size
            )
            ours = []
            for artifact in found:
                run = await client.read_flow_run(artifact.flow_run_id)
                if run.parameters["settings_data"]["home"] == str(settings.home):
                    ours.append(artifact)
            return ours

    import asyncio

    artifacts = asyncio.run(read())
    kinds = {a.key: a.type for a in artifacts}
    assert sorted(kinds.items()) == [
        ("nightly-candidates", "table"),
        ("nightly-summary", "markdown"),
    ]
    (table,) = [a for a in artifacts if a.key == "nightly-candidates"]
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert [r["candidate_id"] for r in rows] == sorted(r["candidate_id"] for r in rows)
    assert len(rows) == 2 and f"first 2 of {changed:,}" in (table.description or "")


def test_artifacts_carry_ids_and_counts_never_subjects_or_memory_text(ingest, settings, stores):
    """Issue 18: Prefect keeps artifact data in its events too, which no API deletes."""
    import asyncio

    from prefect.client.orchestration import get_client

    said = "From now on I prefer the Quokka Editor for everything."
    statements = [
        episode(episode_id=f"pref{i}", subject_id="zoe.privacy", source_role="user", text=said,
                claims=[{"predicate": "preferred_editor", "object": "Quokka Editor",
                         "span": said}], occurred_at=f"2026-07-0{i + 1}T10:00:00Z")
        for i in range(3)
    ]  # fmt: skip
    ingest([*_seed_scenario(), *lines_of(*statements)])
    run_nightly(settings, now=NOW)
    texts = [c.text for c in list_candidates(stores.meta)]
    assert any("Quokka Editor" in (t or "") for t in texts)  # the candidate exists

    async def read():
        async with get_client() as client:
            return await client.read_artifacts()

    for artifact in asyncio.run(read()):
        blob = json.dumps([artifact.data, artifact.description], default=str)
        for secret in ("zoe.privacy", "Quokka", said):
            assert secret not in blob, (artifact.key, secret)


def test_partitions_whose_joined_names_collide_are_both_consolidated(ingest, stores, settings):
    """Tenant ``team/a`` + namespace ``b`` and tenant ``team`` + namespace ``a/b`` once shared
    the ledger key ``team/a/b``: with the same episode count and transaction time, the second
    partition found the first one's ledger entry and was skipped forever."""

    def scope(tenant: str, namespace: str) -> list[str]:
        out = []
        for line in _seed_scenario():
            record = json.loads(line)
            record.update(tenant_id=tenant, namespace=namespace)
            record["episode_id"] = f"{tenant}|{namespace}|{record['episode_id']}"
            out.append(json.dumps(record))
        return out

    at = datetime(2026, 7, 31, tzinfo=UTC)  # the same transaction time for both
    ingest(scope("team/a", "b"), now=at)
    first = run_nightly(settings, now=NOW)
    assert (first["partitions"], first["skipped"]) == (1, 0)
    ingest(scope("team", "a/b"), now=at)
    second = run_nightly(settings, now=NOW)
    assert (second["partitions"], second["skipped"]) == (2, 1)  # only team/a|b had nothing new
    with stores.meta.connect() as con:
        clustered = con.execute(
            "SELECT DISTINCT tenant_id, namespace FROM clusters ORDER BY 1, 2"
        ).fetchall()
        keys = con.execute(
            "SELECT partition_key FROM stage_ledger WHERE stage = 'consolidate' ORDER BY 1"
        ).fetchall()
    assert clustered == [("team", "a/b"), ("team/a", "b")]
    assert keys == [('["team","a/b"]',), ('["team/a","b"]',)]
    scopes = {(c.tenant_id, c.namespace) for c in list_candidates(stores.meta)}
    assert scopes == {("team", "a/b"), ("team/a", "b")}
    assert run_nightly(settings, now=NOW)["skipped"] == 2


@given(
    new=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    tasks=st.integers(min_value=1, max_value=8),
)
def test_partition_batches_cover_the_plan_once(new: list[int], tasks: int) -> None:
    """Every planned partition lands in exactly one batch; at most ``tasks`` batches, none
    empty, each in plan order; the largest batch holds at most the lightest one's work plus
    one partition's (longest-first onto the lightest)."""
    from types import SimpleNamespace

    plan = [SimpleNamespace(work=SimpleNamespace(new_episodes=n)) for n in new]
    batches = partition_batches(plan, tasks)  # type: ignore[arg-type]
    assert sorted(i for b in batches for i in b) == list(range(len(plan)))
    assert len(batches) <= tasks and all(b == sorted(b) and b for b in batches)
    if batches:
        loads = [sum(max(new[i], 1) for i in b) for b in batches]
        assert max(loads) - min(loads) <= max((max(n, 1) for n in new), default=0)


def test_summary_table_counts_the_candidates_mine_produced():
    """The summary's "candidates" column is read from what mine really returns (it once read a
    key MiningResult never had, so the column was always blank)."""
    from flows.nightly import _summary_markdown
    from memory_core.stages.mine.stage import MiningResult

    mined = MiningResult(
        partition="t1/ns", procedural=3, passed=2, auto_rejected=1, insights=2, pitfalls=1,
        preferences=4,
    )  # fmt: skip
    summary = {
        "run_id": "run_x", "now": "2026-08-01T00:00:00Z", "partitions": 2, "skipped": 1,
        "candidates_by_status": {}, "extract": {},
        "results": [
            {"partition": "t1/ns", "cluster": {"new_members": 5, "total_clusters": 2},
             "mine": mined.as_dict()},
            {"partition": "t2/ns", "skipped": True},
        ],
    }  # fmt: skip
    rows = [line for line in _summary_markdown(summary).splitlines() if line.startswith("| t")]
    assert rows == ["| t1/ns | 5 | 2 | 10 |", "| t2/ns | skipped | | |"]


@pytest.mark.slow
def test_process_path_through_the_flow_stores_what_threads_store(tmp_path):
    """With ``runner.processes_from_episodes`` at 1 the flow clusters and mines in worker
    processes (stages/consolidate_pool.py), and the stores end as the threads path leaves
    them: the same candidates, clusters, members, ledger and watermarks."""
    from memory_core.config import load_settings
    from memory_core.embed import HashEmbedder
    from memory_core.stages.ingest import ingest_records
    from memory_core.stores import open_stores
    from tests.flows.crash_kit import diff, snapshot

    snaps, summaries = {}, {}
    for threshold in (0, 1):
        settings = load_settings(
            home=tmp_path / str(threshold), runner={"processes_from_episodes": threshold}
        )
        stores = open_stores(settings)
        ingest_records(stores, settings, RunContext(now=NOW), _seed_scenario(),
                       embedder=HashEmbedder(384), source="episodes.jsonl")  # fmt: skip
        summaries[threshold] = run_nightly(settings, now=NOW)
        snaps[threshold] = snapshot(stores)
    assert summaries[0]["partition_processes"] == 0  # 0: never
    assert summaries[1]["partition_processes"] == 2  # runner.max_workers
    assert summaries[1]["partition_tasks"] == 1  # one writer task for every partition
    assert summaries[1]["candidates_by_status"] == summaries[0]["candidates_by_status"]
    assert summaries[1]["candidates_by_status"]
    problems = diff(snaps[0], snaps[1])
    assert not problems, "\n".join(problems)


def test_processes_only_for_big_nights_on_the_threads_runner():
    """Worker processes when the partitions with new episodes hold the threshold's episodes
    (partitions without new ones do not count): by default from 500k episodes, never with 0,
    never on Dask or Ray (processes already)."""
    from types import SimpleNamespace

    from flows.nightly import compute_processes
    from memory_core.config import Settings

    def plan(*sizes: tuple[int, int]) -> list[SimpleNamespace]:
        return [SimpleNamespace(work=SimpleNamespace(episodes=e, new_episodes=n))
                for e, n in sizes]  # fmt: skip

    settings = Settings.model_validate({"runner": {"processes_from_episodes": 50_000}})
    assert compute_processes(plan((10**6, 10**4)), Settings()) == 2  # type: ignore[arg-type]
    assert compute_processes(plan((499_999, 10**4)), Settings()) == 0  # type: ignore[arg-type]
    never = Settings.model_validate({"runner": {"processes_from_episodes": 0}})
    assert compute_processes(plan((10**7, 10**7)), never) == 0  # type: ignore[arg-type]
    big = plan((30_000, 10), (30_000, 1))
    assert compute_processes(big, settings) == 2  # type: ignore[arg-type]
    assert compute_processes(plan((30_000, 10), (30_000, 0)), settings) == 0  # type: ignore[arg-type]
    assert compute_processes([], settings) == 0
    dask = Settings.model_validate({"runner": {"kind": "dask", "processes_from_episodes": 1}})
    assert compute_processes(big, dask) == 0  # type: ignore[arg-type]
