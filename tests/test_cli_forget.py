"""memctl forget / revoke / expire through the real entry point: receipts as JSON, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memory_core.cli import app
from tests.conftest import episode
from tests.kit import forkserver


def memctl(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_EMBED__MODEL"] = "hash"
    return forkserver.run(
        [sys.executable, "-m", "memory_core.cli", *args, "--home", str(home)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "episodes.jsonl"
    records = [
        episode(episode_id="e0", subject_id="zed", occurred_at="2026-06-25T10:00:00Z"),
        episode(
            episode_id="e1", subject_id="amy", purpose="support", occurred_at="2026-07-25T10:00:00Z"
        ),
        episode(
            episode_id="e2",
            subject_id="amy",
            goal="printer jam",
            occurred_at="2026-07-25T10:00:00Z",
        ),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    home = tmp_path / "home"
    # setup, not the thing tested: the same command in process (the conftest's environment
    # is the subprocess's: no MEMCTL_* but the hash embedder); the tests run the entry point
    args = ["ingest", str(path), "--now", "2026-08-01T00:00:00Z", "--home", str(home)]
    done = CliRunner().invoke(app, args, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return home


def _json(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_forget_subject_prints_a_verified_receipt_without_the_subject(home):
    receipt = _json(memctl("forget", "--subject", "zed", "--format", "json", home=home))
    assert receipt["kind"] == "forget_subject"
    assert receipt["lance_rows_deleted"] == {"episodes": 1}
    assert receipt["verification"]["verified"] is True
    assert "zed" not in json.dumps(receipt)


def test_forget_purpose_and_expire_with_now(home):
    ended = _json(memctl("forget", "--purpose", "support", "--now", "2026-08-01T00:00:00Z",
                         "--format", "json", home=home))  # fmt: skip
    assert ended["expired"] == {"episodes": 1}
    first = _json(memctl("expire", "--now", "2026-08-01T00:00:00Z", "--format", "json", home=home))
    assert first["expired"] == {"episodes": 1}  # e0 is past the 30-day TTL
    again = _json(memctl("expire", "--now", "2026-08-01T00:00:00Z", "--format", "json", home=home))
    assert again["expired"] == {} and again["deleted"] == {}
    later = _json(memctl("expire", "--now", "2026-08-09T00:00:00Z", "--format", "json", home=home))
    assert later["deleted"] == {"episodes": 2}


def test_revoke_needs_a_known_source_and_a_reason(home):
    missing = memctl("revoke", "--source", "nope", "--reason", "bad", home=home)
    assert missing.returncode == 1
    assert "Error: no source 'nope'" in missing.stderr
    done = _json(memctl("revoke", "--source", "e2", "--reason", "tool lied", "--format", "json",
                        home=home))  # fmt: skip
    assert done["changed"][0] == {"id": "e2", "kind": "episode", "action": "revoked",
                                  "from": "active", "to": "revoked", "reason": "tool lied"}  # fmt: skip


def test_forget_needs_exactly_one_target(home):
    both = memctl("forget", "--subject", "a", "--episode", "b", home=home)
    assert both.returncode != 0
    assert "exactly one of --subject S, --episode ID or --purpose P" in both.stderr


def test_forget_queue_only_queues(home):
    queued = _json(memctl("forget", "--episode", "e1", "--queue", "--format", "json", home=home))
    assert queued["status"] == "pending" and queued["request_id"].startswith("del_")
