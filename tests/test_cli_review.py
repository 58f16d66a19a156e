"""`memctl review ...`, `memctl facts` and `memctl procedures`: the CLI contract.

Most calls go through typer's runner in-process (fast); the error paths go through the real
entry point, because exit codes and the one-line ``Error:`` come from ``main``.
"""

from __future__ import annotations

import json
import os
import subprocess
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
from memory_core.stages.score import score_candidates
from memory_core.stores import open_stores
from tests.kit import forkserver

JUNE_28 = "2026-06-28T12:00:00Z"
runner = CliRunner()


def said(eid: str, subject: str, obj: str, day: int, text: str | None = None) -> str:
    text = text or f"The owner is {obj}."
    return json.dumps(
        {
            "episode_id": eid, "tenant_id": "acme", "subject_id": subject, "namespace": "it",
            "occurred_at": f"2026-06-{day:02d}T09:00:00Z", "source_role": "user",
            "text": text, "claims": [{"predicate": "owner", "object": obj, "span": text}],
        }
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """Two teams' owners stated twice each, mined and scored: two candidates in the queue."""
    home = tmp_path / "home"
    settings = load_settings(home=home)
    stores = open_stores(settings)
    now = datetime(2026, 6, 28, 12, tzinfo=UTC)
    ctx = RunContext(now=now)
    lines = [
        said("a1", "team-a", "Mnia", 20, "The owner is Mina."),
        said("a2", "team-a", "Mnia", 25, "Mina owns it."),
        said("b1", "team-b", "Kai", 20),
        said("b2", "team-b", "Kai", 25),
    ]
    ingest_records(stores, settings, ctx, lines, embedder=HashEmbedder(384), source="t.jsonl")
    mine_partition(stores, settings, ctx, Partition("acme", "it"))
    score_candidates(stores, settings.score, ctx, sync=True)
    return home


def memctl(*args: str, home: Path) -> Any:
    result = runner.invoke(app, [*args, "--home", str(home)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def as_json(*args: str, home: Path) -> Any:
    return json.loads(memctl(*args, "--format", "json", home=home))


def test_review_round_trip(home: Path):
    built = as_json("review", "build", "--now", JUNE_28, home=home)
    (batch_id,) = built["created_batches"]
    (batch,) = as_json("review", "list", home=home)
    assert {"batch_id", "tenant_id", "namespace", "kind", "status", "item_count"} <= set(batch)
    assert (batch["batch_id"], batch["kind"], batch["status"], batch["item_count"]) == (
        batch_id, "semantic", "open", 2,
    )  # fmt: skip
    shown = as_json("review", "show", batch_id, "--now", JUNE_28, home=home)
    items = {i["subject_id"]: i for i in shown["items"]}
    assert items["team-a"]["support"]["episodes"][0]["said"] == "The owner is Mina."
    assert items["team-a"]["would"]["outcome"] == "new"
    assert "# Review batch" in memctl("review", "show", batch_id, home=home)
    a, b = items["team-a"]["candidate_id"], items["team-b"]["candidate_id"]
    approved = as_json(
        "review", "approve", batch_id, "--items", a, "--edit", f'{a}={{"object": "Mina"}}',
        "--reviewer", "alice", "--now", JUNE_28, home=home,
    )  # fmt: skip
    assert approved["decided"] == [a] and approved["status"] == "open"
    assert approved["commit"]["facts"] == 1 and approved["flow_run_id"] is None
    rejected = as_json(
        "review", "reject", batch_id, "--reason", "team-b has no owner yet",
        "--reviewer", "bob", "--now", JUNE_28, home=home,
    )  # fmt: skip
    assert rejected["decided"] == [b] and rejected["status"] == "mixed"
    (cand,) = as_json("candidates", "--status", "rejected", home=home)
    assert cand["reason"] == "team-b has no owner yet"
    again = as_json("review", "approve", batch_id, "--items", a, "--reviewer", "alice", home=home)
    assert again["decided"] == [] and again["commit"] is None


def test_facts_and_procedures_bitemporal_listing(home: Path):
    (batch_id,) = as_json("review", "build", "--now", JUNE_28, home=home)["created_batches"]
    memctl("review", "approve", batch_id, "--reviewer", "alice", "--now", JUNE_28, home=home)
    facts = as_json("facts", "--tenant", "acme", "--subject", "team-b", home=home)
    (kai,) = facts
    assert kai["object"] == "Kai" and "vector" not in kai
    assert kai["provenance"][0]["source_kind"] == "episode"
    assert kai["valid_from"] == "2026-06-20T09:00:00+00:00"
    assert as_json("facts", "--as-of", "2026-06-19T00:00:00Z", home=home) == []
    assert as_json("facts", "--known-at", "2026-06-27T00:00:00Z", home=home) == []
    known = as_json("facts", "--as-of", "2026-06-21T00:00:00Z", "--known-at", JUNE_28, home=home)
    assert sorted(r["object"] for r in known) == ["Kai", "Mnia"]  # unedited: the claim as stated
    assert as_json("procedures", home=home) == []
    assert "fact_id" in memctl("facts", home=home)


def test_every_review_command_has_help():
    for args in (["review", "--help"], *[["review", c, "--help"] for c in
                 ("list", "show", "approve", "reject", "build", "wait")],
                 ["facts", "--help"], ["procedures", "--help"]):  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 0, args
        assert "Usage" in result.output


def _real(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_EMBED__MODEL"] = "hash"
    return forkserver.run(
        [sys.executable, "-m", "memory_core.cli", *args, "--home", str(home)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_errors_are_one_line_with_the_next_step(home: Path):
    missing = _real("review", "approve", "batch_nope", "--reviewer", "a", home=home)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip() == (
        "Error: no review batch 'batch_nope'; list batches with `memctl review list`"
    )
    no_reason = _real("review", "reject", "batch_nope", home=home)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    bad_time = runner.invoke(app, ["facts", "--as-of", "yesterday", "--home", str(home)])
    assert bad_time.exit_code == 2 and "--as-of 'yesterday' is not RFC3339" in bad_time.output
    bad_edit = runner.invoke(
        app, ["review", "approve", "b", "--edit", "nojson", "--home", str(home)]
    )
    assert bad_edit.exit_code == 2 and "expected CANDIDATE_ID=JSON" in bad_edit.output
