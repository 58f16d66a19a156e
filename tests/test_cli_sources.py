"""`memctl sources update | list` and deciding a staleness batch with `memctl review`."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from memory_core.cli import app
from memory_core.config import load_settings
from memory_core.context import Partition, RunContext
from memory_core.embed import HashEmbedder
from memory_core.stages.ingest import ingest_records
from memory_core.stages.mine import mine_partition
from memory_core.stages.review import ReviewRequest, build_review_batches, decide_batch
from memory_core.stages.score import score_candidates
from memory_core.stages.staleness import run_staleness
from memory_core.stores import open_stores
from memory_core.stores.review import list_batches
from tests.kit import forkserver

NOW = datetime(2026, 8, 1, tzinfo=UTC)
runner = CliRunner()


def _said(eid: str, day: int) -> str:
    text = "The printer is on floor 2."
    return json.dumps(
        {
            "episode_id": eid, "tenant_id": "acme", "subject_id": "u1", "namespace": "it",
            "occurred_at": f"2026-07-{day:02d}T10:00:00Z", "source_role": "user", "text": text,
            "claims": [{"predicate": "printer_floor", "object": "2", "span": text}],
            "sources": [{"source_id": "kb/printers", "revision": "r1"}],
        }
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """u1's printer floor, stated twice citing kb/printers@r1, approved: an active fact."""
    home = tmp_path / "home"
    settings = load_settings(home=home)
    stores = open_stores(settings)
    ctx = RunContext(now=NOW)
    lines = [_said("p1", 1), _said("p2", 2)]
    ingest_records(stores, settings, ctx, lines, embedder=HashEmbedder(384), source="t.jsonl")
    mine_partition(stores, settings, ctx, Partition("acme", "it"))
    score_candidates(stores, settings.score, ctx, sync=True)
    build_review_batches(stores, settings, ctx)
    (batch,) = list_batches(stores.meta, status="open")
    decide_batch(stores, settings, ctx, batch.batch_id, ReviewRequest(decision="approve",
                 reviewer="alice"), embedder=HashEmbedder(384))  # fmt: skip
    return home


def as_json(*args: str, home: Path) -> Any:
    result = runner.invoke(
        app, [*args, "--home", str(home), "--format", "json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _file(tmp_path: Path, *records: dict[str, Any]) -> Path:
    path = tmp_path / "sources.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_update_list_then_revalidate_through_review(home: Path, tmp_path: Path):
    path = _file(
        tmp_path,
        {"source_id": "kb/printers", "revision": "r2", "changed_at": "2026-08-01T06:00:00Z"},
    )
    done = as_json("sources", "update", str(path), "--now", "2026-08-01T07:00:00Z", home=home)
    assert done["applied"] == ["kb/printers"] and done["ignored"] == []
    (listed,) = as_json("sources", "list", home=home)
    assert (listed["revision"], listed["deleted"]) == ("r2", False)
    settings = load_settings(home=home)
    run_staleness(open_stores(settings), settings, RunContext(now=NOW))
    (batch,) = [b for b in as_json("review", "list", home=home) if b["status"] == "open"]
    assert batch["kind"] == "revalidate" and batch["item_count"] == 1
    shown = as_json("review", "show", batch["batch_id"], home=home)
    (item,) = shown["items"]
    assert item["status"] == "stale" and item["evidence"] == [
        {"source_id": "kb/printers", "revision": "r1", "current_revision": "r2"}
    ]
    text = runner.invoke(app, ["review", "show", batch["batch_id"], "--home", str(home)])
    assert text.exit_code == 0 and "revalidate of **acme/it**" in text.output
    ask = ("recall", "printer floor", "--tenant", "acme", "--subject", "u1", "--type", "semantic",
           "--no-access-log")  # fmt: skip
    assert as_json(*ask, home=home) == []
    (stale,) = as_json(*ask, "--include-stale", home=home)
    assert stale["stale"] is True
    decided = as_json("review", "approve", batch["batch_id"], "--reviewer", "alice", home=home)
    assert decided["effects"] == [{"id": stale["record_id"], "action": "revalidated"}]
    (fresh,) = as_json(*ask, home=home)
    assert fresh["stale"] is False and fresh["sources"] == [
        {"source_id": "kb/printers", "revision": "r2"}
    ]


def test_bad_sources_file_names_line_and_field_and_writes_nothing(home: Path, tmp_path: Path):
    path = _file(
        tmp_path,
        {"source_id": "kb/ok", "revision": "r1", "changed_at": "2026-08-01T06:00:00Z"},
        {"source_id": "kb/bad", "revision": "r1", "changed_at": "yesterday"},
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_EMBED__MODEL"] = "hash"
    proc = forkserver.run(
        [sys.executable, "-m", "memory_core.cli", "sources", "update", str(path), "--home",
         str(home)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == ""
    assert "line 2" in proc.stderr and "changed_at (source_id=kb/bad)" in proc.stderr
    assert as_json("sources", "list", home=home) == []
