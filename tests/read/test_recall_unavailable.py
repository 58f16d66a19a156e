"""An unreachable store fails fast and loudly; the read path never touches the control plane."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core.embed import HashEmbedder
from memory_core.errors import DimensionMismatch, MemoryUnavailable, TransientError
from memory_core.recall import Recaller
from memory_core.stores.lance import LanceStore
from tests.recall_rows import make_row, write_rows

NOW = datetime(2026, 8, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]


def test_missing_database_fails_fast_and_creates_nothing(tmp_path, embedder):
    uri = tmp_path / "typo" / "lance"
    t0 = time.perf_counter()
    with pytest.raises(MemoryUnavailable) as info:
        Recaller(str(uri), embedder=embedder)
    assert time.perf_counter() - t0 < 1.0
    assert isinstance(info.value, TransientError)
    assert str(info.value).startswith(f"memory unavailable at {uri}: no Lance database here")
    assert not uri.exists()


def test_missing_tables_are_unavailable_not_empty(tmp_path, embedder):
    uri = tmp_path / "lance"
    uri.mkdir()
    with (
        Recaller(str(uri), embedder=embedder) as memory,
        pytest.raises(MemoryUnavailable, match="run `memctl init` first"),
    ):
        memory.recall("anything", tenant_id="acme", subject_id="u1", now=NOW)


def test_io_error_mid_life_is_unavailable_and_an_empty_store_is_just_empty(tmp_path, embedder):
    store = LanceStore(str(tmp_path / "lance"))
    store.ensure_tables(384)
    with Recaller(store.uri, embedder=embedder) as memory:
        empty = memory.recall("vpn", tenant_id="acme", subject_id="u1", now=NOW)
        assert empty.records == []  # nothing remembered: a valid, empty answer
        write_rows(store, "facts", [make_row("facts", embedder, "f1", text="vpn")])
        assert len(memory.recall("vpn", tenant_id="acme", subject_id="u1", now=NOW)) == 1
        shutil.rmtree(tmp_path / "lance" / "facts.lance" / "data")
        with pytest.raises(MemoryUnavailable, match="vector search of facts"):
            memory.recall("vpn", tenant_id="acme", subject_id="u1", now=NOW)


def test_an_embedder_of_another_width_is_refused(tmp_path):
    store = LanceStore(str(tmp_path / "lance"))
    store.ensure_tables(384)
    with (
        Recaller(store.uri, embedder=HashEmbedder(32)) as memory,
        pytest.raises(DimensionMismatch, match="stores 384-d vectors"),
    ):
        memory.recall("vpn", tenant_id="acme", now=NOW)


def test_recall_imports_neither_prefect_nor_duckdb_nor_opens_the_control_plane(settings):
    store = LanceStore(settings.lance_uri)
    store.ensure_tables(384)
    write_rows(store, "facts", [make_row("facts", HashEmbedder(384), "f1", text="vpn")])
    script = textwrap.dedent(
        f"""
        import json, sys
        from memory_core.recall import recall
        result = recall("vpn", tenant_id="acme", subject_id="u1", home={str(settings.home)!r})
        print(json.dumps({{
            "ids": [r["record_id"] for r in result.records],
            "modules": sorted(m for m in ("duckdb", "prefect") if m in sys.modules),
        }}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={"MEMCTL_EMBED__MODEL": "hash", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"ids": ["f1"], "modules": []}
    assert not settings.meta_path.exists()
