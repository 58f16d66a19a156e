"""`memctl ingest --from openai-chat | anthropic-messages` through the real write path: real
LanceDB and DuckDB on tmp dirs; redaction, idempotency, quarantine and all-or-nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.errors import EpisodeConflict, ValidationFailed
from memory_core.steps import ToolCall, decode_step
from memory_core.stores import Stores
from memory_core.transcripts import TranscriptFormat
from memory_core.transcripts.ingest import TranscriptIngestResult, ingest_transcripts
from tests.conftest import NOW
from tests.kit import forkserver
from tests.transcripts.sessions import (
    API_KEY,
    DB_PASSWORD,
    TOOL_SAYS,
    anthropic_session,
    openai_session,
)

OPENAI = TranscriptFormat.openai_chat
ANTHROPIC = TranscriptFormat.anthropic_messages


def write(path: Path, *lines: Any) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


@pytest.fixture
def run(stores: Stores, settings: Settings, embedder: HashEmbedder):
    def go(
        path: Path, fmt: TranscriptFormat, *, quarantine: bool = False
    ) -> TranscriptIngestResult:
        return ingest_transcripts(
            stores, settings, RunContext(now=NOW), path, fmt=fmt, embedder=embedder,
            quarantine=quarantine,
        )  # fmt: skip

    return go


def rows(stores: Stores) -> list[dict[str, Any]]:
    table = stores.lance.scan("episodes")
    return sorted(table.drop(["vector"]).to_pylist(), key=lambda r: r["occurred_at"])


def test_both_formats_land_with_roles_actions_and_no_secrets(tmp_path, run, stores) -> None:
    second = openai_session(session_id="chatcmpl-session-0002", subject_id="bob")
    path = write(tmp_path / "openai.jsonl", openai_session(), "", second)
    result = run(path, OPENAI)
    assert (result.lines, result.sessions, result.trajectories) == (2, 2, 2)
    assert result.episodes == result.inserted == 22
    assert result.episodes_by_role == {"agent": 8, "system": 2, "tool": 6, "user": 4}
    assert result.outcomes == {"success": 2}
    assert result.redactions  # the key in a tool argument, the password in a tool result
    anthropic = run(write(tmp_path / "anthropic.jsonl", anthropic_session()), ANTHROPIC)
    assert anthropic.episodes_by_role == {"agent": 3, "system": 1, "tool": 3, "user": 2}

    stored = rows(stores)
    assert len(stored) == 22 + 10
    dumped = json.dumps(stored, default=str)
    assert API_KEY not in dumped and DB_PASSWORD not in dumped
    trajectories = [r for r in stored if r["actions"]]
    assert len(trajectories) == 3
    steps = [decode_step(a) for a in trajectories[0]["actions"]]
    assert all(isinstance(s, ToolCall) for s in steps)
    assert [s.tool for s in steps] == ["get_order", "get_customer", "cancel_order"]
    assert steps[0].args["order_id"] == "8812" and API_KEY not in steps[0].args["api_key"]
    # tool output never speaks with the user's authority, whatever role carried it
    said = [r for r in stored if r["text"] and TOOL_SAYS in r["text"]]
    assert len(said) == 3 and {r["source_role"] for r in said} == {"tool"}
    assert {r["session_id"] for r in stored} == {
        "chatcmpl-session-0001", "chatcmpl-session-0002", "msg-session-0001",
    }  # fmt: skip


def test_reingest_is_a_noop_and_a_changed_session_a_conflict(tmp_path, run, stores) -> None:
    path = write(tmp_path / "s.jsonl", openai_session())
    first = run(path, OPENAI)
    version = stores.lance.version("episodes")
    again = run(path, OPENAI)
    assert (again.inserted, again.unchanged) == (0, first.inserted)
    assert stores.lance.version("episodes") == version
    changed = openai_session()
    changed["messages"][6]["content"] = "No, keep it."
    other = write(tmp_path / "changed.jsonl", openai_session(session_id="new"), changed)
    with pytest.raises(EpisodeConflict) as info:
        run(other, OPENAI)
    assert info.value.conflicts[0][0] == 2  # the transcript's line, not the episode's index
    assert "line 2" in str(info.value)
    assert stores.lance.version("episodes") == version  # nothing of line 1 written either


BAD_LINES = [
    "{not json",
    json.dumps(openai_session(session_id="x1", messages=[{"role": "robot", "content": "hi"}])),
    json.dumps(openai_session(session_id="x2", tenant_id=None)),
]


def _bad_args() -> dict[str, Any]:
    line = openai_session(session_id="x3")
    line["messages"][2]["tool_calls"][0]["function"]["arguments"] = (
        '{"order_id": "8812", "api_key": "' + API_KEY + '"'
    )
    return line


def _orphan_result() -> dict[str, Any]:
    line = openai_session(session_id="x4")
    line["messages"][3]["tool_call_id"] = "call_zz"
    return line


def test_bad_lines_write_nothing_and_name_line_and_message(tmp_path, run, stores, embedder) -> None:
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    path = write(
        tmp_path / "bad.jsonl", openai_session(), *BAD_LINES, _bad_args(), _orphan_result()
    )
    with pytest.raises(ValidationFailed) as info:
        run(path, OPENAI)
    errors = [str(e) for e in info.value.errors]
    assert [e.line for e in info.value.errors] == [2, 3, 4, 5, 6]
    assert errors[0].startswith("line 2: (line): not valid JSON")
    assert errors[1].startswith("line 3: messages[0].role: must be one of")
    assert errors[2] == "line 4: tenant_id: required"
    assert errors[3].startswith("line 5: messages[2].tool_calls[0].function.arguments: not valid")
    assert errors[4].startswith("line 6: messages[3].tool_call_id: tool result without a call")
    assert "\n" not in str(info.value) and "rerun with --quarantine" in str(info.value)
    assert stores.lance.count("episodes") == 0


def test_episode_level_errors_name_the_message(tmp_path, run) -> None:
    line = openai_session()
    line["sensitivity"] = "high"
    line["purpose"] = "p" * 201  # too long for an episode field: refused at the session
    with pytest.raises(ValidationFailed) as info:
        run(write(tmp_path / "s.jsonl", line), OPENAI)
    assert str(info.value.errors[0]).startswith("line 1: purpose: longer than 200")
    line = openai_session()
    line["expires_at"] = "2026-01-01T00:00:00"  # naive: the session header says so
    with pytest.raises(ValidationFailed) as info:
        run(write(tmp_path / "s.jsonl", line), OPENAI)
    assert str(info.value.errors[0]).startswith("line 1: expires_at: not an RFC3339")


def test_quarantine_keeps_bad_sessions_whole_and_redacted(tmp_path, run, stores) -> None:
    path = write(tmp_path / "mixed.jsonl", openai_session(), _bad_args(), _orphan_result())
    result = run(path, OPENAI, quarantine=True)
    assert (result.sessions, result.quarantined) == (1, 2)
    assert result.inserted == 11
    assert {r["session_id"] for r in rows(stores)} == {"chatcmpl-session-0001"}  # none of x3/x4
    with stores.meta.connect() as con:
        got = con.execute(
            "SELECT line_no, tenant_id, subject_id, errors, raw FROM quarantine ORDER BY line_no"
        ).fetchall()
    assert [g[0] for g in got] == [2, 3]
    assert got[0][1:3] == ("acme", "ada")
    assert json.loads(got[0][3])[0]["field"] == "messages[2].tool_calls[0].function.arguments"
    assert "tool result without a call" in json.loads(got[1][3])[0]["reason"]
    assert all(API_KEY not in g[4] and DB_PASSWORD not in g[4] for g in got)
    again = run(path, OPENAI, quarantine=True)
    assert (again.inserted, again.unchanged) == (0, 11)


def test_cli_ingest_from(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    env["MEMCTL_EMBED__MODEL"] = "hash"
    home = tmp_path / "home"

    def memctl(*args: str) -> subprocess.CompletedProcess[str]:
        return forkserver.run(
            [sys.executable, "-m", "memory_core.cli", *args, "--home", str(home)],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip

    good = write(tmp_path / "a.jsonl", anthropic_session())
    done = memctl("ingest", str(good), "--from", "anthropic-messages", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["format"] == "anthropic-messages" and report["inserted"] == 10
    bad = write(tmp_path / "b.jsonl", anthropic_session(session_id="s2", messages="hi"))
    failed = memctl("ingest", str(bad), "--from", "anthropic-messages")
    assert failed.returncode == 1
    assert "line 1: messages: must be a non-empty list" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1
    # the default is today's contract: a session line is not an episode
    plain = memctl("ingest", str(good), "--format", "json")
    assert plain.returncode == 1 and "line 1" in plain.stderr


def test_crlf_lines_and_a_line_that_is_not_utf8(tmp_path, run, stores) -> None:
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(
        json.dumps(openai_session()).encode() + b"\r\n"
        + b'{"session_id": "\xff"}\r\n\r\n'
        + json.dumps(openai_session(session_id="z")).encode()
    )  # fmt: skip
    with pytest.raises(ValidationFailed) as info:
        run(path, OPENAI)
    assert [str(e) for e in info.value.errors] == [
        "line 2: (line): not UTF-8 text: invalid start byte"
    ]
    result = run(path, OPENAI, quarantine=True)
    assert (result.lines, result.sessions, result.quarantined) == (3, 2, 1)
    assert {r["session_id"] for r in rows(stores)} == {"chatcmpl-session-0001", "z"}


def test_progress_reaches_the_file_size(tmp_path, stores, settings, embedder) -> None:
    path = write(tmp_path / "p.jsonl", *(openai_session(session_id=f"s{i}") for i in range(300)))
    seen: list[int] = []
    ingest_transcripts(
        stores, settings, RunContext(now=NOW), path, fmt=OPENAI, embedder=embedder,
        progress=seen.append,
    )  # fmt: skip
    assert seen == sorted(seen) and seen[-1] == path.stat().st_size and len(seen) == 2
