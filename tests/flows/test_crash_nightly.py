"""Crash safety: SIGKILL the nightly flow's process at every kill point, rerun, compare.

Each case copies one ingested home, runs ``memctl consolidate`` in a subprocess (a real flow
run against the session harness's Prefect server on loopback; the process is forked from one
that has already imported Prefect and the SDK, tests/kit/forkserver.py) with
``MEMCTL_KILL_AT=<point>`` so the process kills itself there with SIGKILL, then reruns the
flow uninterrupted and compares with a run that was never interrupted: the same rows in every
Lance and DuckDB table (minus run ids and write times), no duplicate ids, no lost episode, and
no LLM request sent twice (the fake Anthropic API on loopback counts every request from every
process).

Kill points (17): the flow's stage boundaries and one point inside each writing stage.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flows.nightly import run_nightly
from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.lease import current_holder
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores
from tests.flows.crash_kit import diff, fake_anthropic_server, scenario_lines, snapshot
from tests.kit import forkserver
from tests.kit.anthropic import FakeAnthropic
from tests.kit.once import built_once
from tests.kit.prefect import LocalPrefect, harness_prefect

NOW = datetime(2026, 8, 1, tzinfo=UTC)

# two units of work for the xdist workers (tests/kit/schedule.py); the template home and the
# baseline are built once per session and shared (tests/kit/once.py)
XDIST_SPLIT = 2

KILL_POINTS = [
    "nightly.leased",  # boundary: lease taken, nothing written
    "extract.submitted",  # inside extract: batch recorded, never polled
    "extract.collected",  # inside extract: results read, nothing written
    "extract.written",  # inside extract: facts written, paraphrases not merged
    "nightly.embedded",  # boundary embed -> extract (vectors filled, nothing else)
    "nightly.extracted",  # boundary extract -> partitions
    "cluster.in_transaction",  # inside cluster: clusters written, members not, uncommitted
    "partition.clustered",  # boundary cluster -> mine
    "mine.upserted",  # inside mine: candidates written, blocked claims not counted
    "partition.mined",  # boundary mine -> stage ledger
    "partition.watermark",  # inside the partition task: watermark written, ledger not
    "nightly.partitions_done",  # boundary partitions -> score
    "score.cached",  # inside score: answers cached, candidates not updated
    "score.candidates",  # inside score: candidates updated, LLM ledger not written
    "nightly.scored",  # boundary score -> workflow text
    "workflow.submitted",  # inside workflow text: batch recorded, never polled
    "workflow.cached",  # inside workflow text: answers cached with their spend, stats not set
    "review.batched",  # inside review: batches written, auto-approved facts not promoted
    "nightly.batched",  # boundary review -> staleness
    "nightly.stale_checked",  # boundary staleness -> run summary and report
]


def _env(api_url: str) -> dict[str, str]:
    return {
        "MEMCTL_EMBED__MODEL": "hash",
        "MEMCTL_REVIEW__AUTO_APPROVE_USER_SEMANTIC": "true",
        "MEMCTL_REVIEW__AUTO_APPROVE_MIN_CONFIDENCE": "0.0",
        "MEMCTL_SCORE__LLM_KINDS": '["procedural", "semantic"]',
        "MEMCTL_SCORE__MAX_RETRIES": "0",
        # batch from one request on: the scenario has fewer than the default 20, and the
        # batch path (recorded, resumed after a kill) is what the workflow kill points test
        "MEMCTL_SCORE__BATCH_MIN_REQUESTS": "1",
        "ANTHROPIC_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": api_url,
    }


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[FakeAnthropic, str]]:
    with fake_anthropic_server() as served:
        yield served


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> LocalPrefect:
    # the session harness's server: the killed run records its flow run where the rerun does
    return harness_prefect(tmp_path_factory.mktemp("crash-prefect"))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One home with the scenario ingested, built once per session (tests/kit/once.py: both
    halves of this file share it); every case works on a copy."""

    def build(root: Path) -> None:
        settings = load_settings(home=root / "home")
        ingest_records(
            open_stores(settings),
            settings,
            RunContext(now=NOW),
            scenario_lines(),
            embedder=HashEmbedder(384),
            source="episodes.jsonl",
        )

    return built_once(tmp_path_factory, "crash-nightly-template", build) / "home"


def _reset(fake: FakeAnthropic) -> None:
    fake.counts.clear()
    fake.bodies.clear()
    fake.batches.clear()  # batch ids restart, so a case and the baseline name them alike
    fake._attempts.clear()
    fake._cache_written = False  # the fake's prompt cache: written by the first request


def _run_here(home: Path, monkeypatch: pytest.MonkeyPatch, api_url: str) -> dict[str, Any]:
    for key, value in _env(api_url).items():
        monkeypatch.setenv(key, value)
    return run_nightly(load_settings(home=home), now=NOW)


def _requests(fake: FakeAnthropic) -> list[str]:
    """One key per LLM request: its user message (what would be paid for twice)."""
    bodies = fake.bodies.get("messages", []) + [
        r["params"] for b in fake.bodies.get("batch_create", []) for r in b["requests"]
    ]
    return [json.dumps(b["messages"], sort_keys=True) for b in bodies]


@pytest.fixture(scope="module")
def baseline(
    template: Path, api: tuple[FakeAnthropic, str], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """What a run that was never interrupted leaves and sends: run once per session (the
    first worker to ask runs it against its own fake API; both halves compare with it)."""
    fake, url = api

    def build(root: Path) -> None:
        home = root / "home"
        shutil.copytree(template, home)
        _reset(fake)
        with pytest.MonkeyPatch.context() as mp:
            summary = _run_here(home, mp, url)
        requests = _requests(fake)
        snap = snapshot(open_stores(load_settings(home=home)))
        # the scenario exercises what the kill points claim to cover
        assert summary["partitions"] >= 1
        assert requests, "the baseline sent no LLM request: the harness would prove nothing"
        assert snap["lance.facts"], "nothing was auto-approved into Lance facts"
        assert snap["llm_ledger"] and snap["review_batches"] and snap["watermarks"]
        assert snap["extracted_facts"], (
            "the extract stage wrote nothing: its kill points prove nothing"
        )
        (root / "baseline.json").write_text(json.dumps({"snapshot": snap, "requests": requests}))

    built = built_once(tmp_path_factory, "crash-nightly-baseline", build)
    return json.loads((built / "baseline.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
def test_killed_run_converges_on_rerun(
    point: str,
    template: Path,
    baseline: dict[str, Any],
    api: tuple[FakeAnthropic, str],
    server: LocalPrefect,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, url = api
    home = tmp_path / "home"
    shutil.copytree(template, home)
    _reset(fake)
    memctl = Path(sys.executable).with_name("memctl")
    killed = forkserver.run(
        [str(memctl), "consolidate", "--home", str(home), "--now", NOW.isoformat()],
        env=server.env(**_env(url), MEMCTL_KILL_AT=point),
        capture_output=True,
        timeout=180,
        check=False,
        preload_prefect=True,  # a real process, forked from one that imported Prefect
    )
    assert killed.returncode == -9, (
        f"{point} was not reached (exit {killed.returncode}): {killed.stderr.decode()[-1500:]}"
    )
    stores = open_stores(load_settings(home=home))
    holder = current_holder(stores.meta)  # left by the killed run; the rerun takes it over
    assert holder is not None and holder.flow == "nightly-consolidation"

    _run_here(home, monkeypatch, url)

    got = snapshot(stores)
    problems = diff(baseline["snapshot"], got)
    assert not problems, f"after a kill at {point}:\n" + "\n".join(problems)
    sent = _requests(fake)
    repeated = [k for k, n in Counter(sent).items() if n > 1]
    assert not repeated, f"after a kill at {point}: {len(repeated)} LLM request(s) sent twice"
    assert sorted(sent) == sorted(baseline["requests"])  # each paid request exactly once
    assert current_holder(stores.meta) is None
