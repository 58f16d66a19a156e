"""The CLI contract through the real entry point: JSON on stdout, one-line errors, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import episode
from tests.kit import forkserver

ROOT = Path(__file__).resolve().parents[1]


def memctl(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_EMBED__MODEL"] = "hash"
    return forkserver.run(
        [sys.executable, "-m", "memory_core.cli", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "episodes.jsonl"
    path.write_text(
        "\n".join(json.dumps(episode(episode_id=f"e{i}", subject_id=f"u{i % 2}")) for i in range(3))
        + "\n"
    )
    return path


def test_init_ingest_status_round_trip(tmp_path, jsonl):
    home = tmp_path / "home"
    init = memctl("init", "--format", "json", home=home)
    assert init.returncode == 0, init.stderr
    assert json.loads(init.stdout)["created_tables"] == [
        "episodes",
        "facts",
        "procedures",
        "digests",
    ]
    first = memctl(
        "ingest", str(jsonl), "--format", "json", "--now", "2026-08-01T00:00:00Z", home=home
    )
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["inserted"] == 3
    again = memctl("ingest", str(jsonl), "--format", "json", home=home)
    assert json.loads(again.stdout)["unchanged"] == 3
    status = json.loads(memctl("status", "--format", "json", home=home).stdout)
    assert status["tables"]["episodes"]["rows"] == 3
    assert status["tables"]["episodes"]["by_status"] == {"active": 3}
    assert status["control_plane"]["audit_log"] >= 2


def test_bad_file_exits_non_zero_with_one_line_reason(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(episode(outcome="meh")) + "\n")
    result = memctl("ingest", str(bad), home=tmp_path / "home")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ")
    assert "line 1 (episode_id=e1): outcome" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_now_is_a_usage_error(tmp_path, jsonl):
    result = memctl("ingest", str(jsonl), "--now", "yesterday", home=tmp_path / "home")
    assert result.returncode != 0
    assert "RFC3339" in result.stderr


def test_invalid_config_fails_at_start_naming_the_key(tmp_path):
    env_home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_CLUSTER__THRESHOLD"] = "-3"
    result = forkserver.run(
        [sys.executable, "-m", "memory_core.cli", "status", "--home", str(env_home)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "cluster.threshold" in result.stderr
    assert not (env_home / "meta.duckdb").exists()


def test_every_command_has_help():
    from typer.main import get_command

    from memory_core.cli import app

    group = get_command(app)
    for name, command in group.commands.items():
        assert command.help, f"{name} has no help text"


def test_embed_fills_what_ingest_left_without_a_vector(tmp_path, jsonl):
    home = tmp_path / "home"
    first = memctl("ingest", str(jsonl), "--format", "json", home=home)
    assert json.loads(first.stdout)["pending_embedding"] == 3, first.stderr
    some = memctl("embed", "--limit", "2", "--format", "json", home=home)
    assert some.returncode == 0, some.stderr
    got = json.loads(some.stdout)
    assert (got["pending_before"], got["embedded"], got["pending_after"]) == (3, 2, 1)
    rest = json.loads(memctl("embed", "--format", "json", home=home).stdout)
    assert (rest["embedded"], rest["pending_after"]) == (1, 0)
    idle = json.loads(memctl("embed", "--format", "json", home=home).stdout)
    assert idle == {"pending_before": 0, "embedded": 0, "pending_after": 0}
    bad = memctl("embed", "--limit", "0", home=home)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
