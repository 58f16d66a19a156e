"""Shared fixtures: real throwaway stores under tmp_path and a clean environment."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from memory_core.config import Settings, load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.ingest import IngestResult, ingest_records
from memory_core.stores import Stores, open_stores
from tests.kit import lance_template, meta_template
from tests.kit.duckdb_instances import kept_for_this_test
from tests.kit.schedule import assign_groups, name_units_in_node_ids

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)

# The suite runs on shared 2-core machines: an example's wall time says nothing about the code
# (a property test in test_nightly failed hypothesis' 200 ms deadline and its too_slow check at
# load ~24). Tests that pass their own suppress_health_check list name too_slow themselves.
hypothesis_settings.register_profile(
    "memctl", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("memctl")

# a fresh home's DuckDB file starts as a copy of one migrated once per test process, not
# migrated again (tests/kit/meta_template.py; MEMCTL_TEST_META_TEMPLATE=0 turns it off)
meta_template.install()
# and its Lance tables (with their scalar indices) as a copy of empty ones made once per test
# process (tests/kit/lance_template.py; MEMCTL_TEST_LANCE_TEMPLATE=0 turns it off)
lance_template.install()


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """Units of work for the xdist workers (tests/kit/schedule.py): named before xdist's
    worker reads them into the node ids, and put there after it if its write did not take."""
    assign_groups(items)
    yield
    name_units_in_node_ids(config, items)


# Garbage collection in a test process: what collection imported (Prefect, lancedb's generated
# models, pydantic schemas, the test modules) lives until the process ends, yet every full
# collection walked it again. Frozen once collected and full collections 10x rarer: ~3.5 -> ~1.2 CPU s of collections per worker over tests/stages,
# tests/stores and tests/read (BENCHMARKS.md, s41). Reference counting still frees the rest at
# once; only cyclic garbage waits longer.
GC_THRESHOLDS = (700, 10, 100)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the test's fixtures are torn down: stop the local Prefect server when the unit
    of tests that share it is done (tests/kit/prefect.py)."""
    yield
    from tests.kit.prefect import stop_local_prefect_after

    stop_local_prefect_after(item, nextitem)


@pytest.fixture(autouse=True, scope="session")
def kit_switches_read() -> Iterator[None]:
    """The kits' ``MEMCTL_TEST_*=0`` switches are read when they are imported; memctl refuses
    a MEMCTL_ variable that no setting reads, so they leave the environment before any module
    fixture loads settings (``clean_environ`` does the same for every test)."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("MEMCTL_TEST_")}
    yield
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def duckdb_instances(request: pytest.FixtureRequest) -> Iterator[None]:
    """DuckDB instances kept alive while a test runs (tests/kit/duckdb_instances.py); a
    module that starts processes by itself sets ``KEEP_DUCKDB_INSTANCES = False``, a test
    that reads DuckDB files at rest (their bytes, a copy) is marked ``duckdb_at_rest``."""
    keep = getattr(request.module, "KEEP_DUCKDB_INSTANCES", True)
    with kept_for_this_test(keep and not request.node.get_closest_marker("duckdb_at_rest")):
        yield


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test sees the developer's MEMCTL_* settings or a real API key."""
    for key in list(os.environ):
        if key.startswith("MEMCTL_") or key == "ANTHROPIC_API_KEY":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MEMCTL_EMBED__MODEL", "hash")
    yield


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(home=tmp_path / "home")


@pytest.fixture
def stores(settings: Settings) -> Stores:
    return open_stores(settings)


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(384)


def episode(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "episode_id": "e1",
        "tenant_id": "acme",
        "subject_id": "u1",
        "namespace": "it",
        "occurred_at": "2026-07-01T10:00:00Z",
        "source_role": "agent",
        "goal": "VPN fails with error 720",
        "actions": ["reset network adapter", "reconnect vpn"],
        "outcome": "success",
        "conditions": {"error_code": "720", "adapter_mismatch": "true"},
        "text": "Reset the adapter and the VPN came back.",
    }
    base.update(overrides)
    return base


def lines_of(*records: dict[str, Any]) -> list[str]:
    return [json.dumps(r) for r in records]


@pytest.fixture
def ingest(
    stores: Stores, settings: Settings, embedder: HashEmbedder
) -> Callable[..., IngestResult]:
    def run(lines: list[str], *, quarantine: bool = False, now: datetime = NOW) -> IngestResult:
        return ingest_records(
            stores,
            settings,
            RunContext(now=now),
            lines,
            embedder=embedder,
            quarantine=quarantine,
            source="episodes.jsonl",
        )

    return run
