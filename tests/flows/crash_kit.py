"""What the crash harness needs besides the flow: the fake Anthropic API's answers, the
scenario, and a snapshot of every table that ignores what legitimately differs between runs.

The fake API is the kit's ``FakeAnthropic`` behind its loopback HTTP server
(tests/kit/anthropic_server.py), so the flow's subprocess drives the real SDK through
``ANTHROPIC_BASE_URL`` and every request it makes, in any process, is counted here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from memory_core.stores import Stores
from memory_core.stores.schemas import ID_COLUMN, TABLES
from tests.conftest import episode, lines_of
from tests.flows.test_nightly import _seed_scenario
from tests.kit.anthropic import VALID, FakeAnthropic
from tests.kit.anthropic_server import fake_anthropic_server as kit_server

# Columns that name the run or the wall-clock time of a write: a killed run and its rerun
# stamp them differently, and that is not a difference in the memory.
VOLATILE = {
    "run_id",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "assigned_at",
    "logged_at",
    "applied_at",
    "entry_id",
    "event_id",
    "seconds",  # stage durations
    # how *this* run obtained a candidate's score: a rerun after a kill reads the answer the
    # killed run paid for from the cache ("cache", no message id) instead of the API ("sync")
    "score_source",
    "message_id",
    "duration_s",
    "extracted_at",  # when a session's facts were written (the rerun writes them)
    # how this run obtained a batch's results: resumed from the killed run or collected itself
    "resumed",
    "submitted_by_run",
}
# Inside JSON bodies only (a candidate's stats): which batch paid for a score is known to the
# run that collected it; a rerun after a kill between caching and updating reads the cached
# answer (score_source "cache", no message or batch id). The batch records themselves (the
# llm_batches.batch_id column) are still compared.
VOLATILE_IN_JSON = VOLATILE | {"batch_id"}
# Not compared: `runs` and `audit_log` are history (the killed run did start, and did act);
# `leases` is empty after any finished run; `schema_version` is the file's own bookkeeping.
HISTORY_TABLES = {"runs", "audit_log", "leases", "schema_version"}
# Per-run reports inside otherwise compared tables: what *that* run did (a rerun after a kill
# clusters fewer episodes, scores from the cache), not the state it leaves.
REPORT_COLUMNS = {"stage_ledger": {"result"}}
REPORT_ROWS = {"llm_ledger": ("mode", "outcome")}  # spend rows are compared, outcome rows not


@contextmanager
def fake_anthropic_server() -> Iterator[tuple[FakeAnthropic, str]]:
    """The kit's loopback fake API answering as ``crash_answer``: (the fake, its base URL)."""
    with kit_server(crash_answer) as served:
        yield served


def scenario_lines() -> list[str]:
    """The nightly test's VPN scenario (procedures, counterexamples) plus a user's stated
    preference in two sessions, so scoring and auto-approval into Lance facts both run."""
    prefs = [
        episode(
            episode_id=f"pref{i}",
            subject_id="ana",
            session_id=f"s-pref{i}",
            source_role="user",
            goal="set up editor",
            actions=[],
            outcome="unknown",
            conditions={},
            text="I always use vim for editing.",
            claims=[{"predicate": "prefers_editor", "object": "vim", "span": "I always use vim"}],
            occurred_at=f"2026-07-2{i}T10:00:00Z",
        )
        for i in range(3)
    ]
    chat = [  # raw conversation turns without claims: the extract stage's input
        episode(
            episode_id=f"chat{i}",
            subject_id="ben",
            session_id=f"s-chat{i}",
            source_role="user",
            goal=None,
            actions=[],
            outcome="unknown",
            conditions={},
            text="I'm vegetarian, remember that for the team lunch.",
            occurred_at=f"2026-07-2{i}T11:00:00Z",
        )
        for i in range(2)
    ]
    return [*_seed_scenario(), *lines_of(*prefs, *chat)]


def crash_answer(params: dict[str, Any], attempt: int) -> str:
    """The fake's answer: an extraction for extraction requests, a valid score otherwise."""
    from memory_core.stages.extract.prompt import RUBRIC as EXTRACT_RUBRIC

    if params.get("system", [{}])[0].get("text") != EXTRACT_RUBRIC:
        return json.dumps(VALID)
    body = params["messages"][0]["content"]
    refs = re.findall(r"^\[(t\d+)\] user(?: ben)?: .*vegetarian", body, re.M)
    facts = [
        {"subject_id": "ben", "predicate": "diet", "object": "vegetarian", "kind": "fact",
         "evidence": [ref], "speaker_role": "user", "importance": 4}
        for ref in refs
    ]  # fmt: skip
    return json.dumps({"facts": facts})


def _normal(value: Any, *, in_json: bool = False) -> Any:
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return _normal(json.loads(value), in_json=True)
        except ValueError:
            return value
    if isinstance(value, dict):
        drop = VOLATILE_IN_JSON if in_json else VOLATILE
        return {k: _normal(v, in_json=in_json) for k, v in sorted(value.items()) if k not in drop}
    if isinstance(value, list):
        return [_normal(v, in_json=in_json) for v in value]
    return value


def snapshot(stores: Stores) -> dict[str, Any]:
    """Every Lance and DuckDB table's rows (minus run ids and write times), sorted."""
    out: dict[str, Any] = {}
    for name in TABLES:
        rows = stores.lance.scan(name).drop_columns(["vector"]).to_pylist()
        ids = [r[ID_COLUMN[name]] for r in rows]
        assert len(ids) == len(set(ids)), f"duplicate ids in Lance table {name}"
        out[f"lance.{name}"] = sorted(json.dumps(_normal(r), default=str) for r in rows)
    with stores.meta.connect() as con:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables ORDER BY table_name"
            ).fetchall()
        ]
        for table in tables:
            if table in HISTORY_TABLES:
                continue
            cur = con.execute(f"SELECT * FROM {table}")
            cols = [d[0] for d in cur.description]
            rows = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
            drop = REPORT_COLUMNS.get(table, set())
            rows = [{k: v for k, v in r.items() if k not in drop} for r in rows]
            if table in REPORT_ROWS:
                col, value = REPORT_ROWS[table]
                rows = [r for r in rows if r[col] != value]
            out[table] = sorted(json.dumps(_normal(r), default=str) for r in rows)
    return out


def _changed(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _changed(a.get(key), b.get(key), f"{path}.{key}")
        return out
    return [] if a == b else [f"{path}: {a!r:.80} -> {b!r:.80}"]


def _key(row: dict[str, Any]) -> str:
    ids = [f"{k}={row[k]}" for k in sorted(row) if k.endswith(("_id", "_hash", "name"))]
    return ",".join(ids[:2]) or json.dumps(row)


def diff(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Readable differences, per table (field by field when one row changed)."""
    lines = []
    for table in sorted(set(expected) | set(got)):
        a, b = set(expected.get(table, [])), set(got.get(table, []))
        if a == b and len(expected.get(table, [])) == len(got.get(table, [])):
            continue
        missing = [json.loads(r) for r in sorted(a - b)]
        extra = {_key(r): r for r in (json.loads(r) for r in sorted(b - a))}
        for row in missing:
            other = extra.pop(_key(row), None)
            if other is None:
                lines.append(f"{table}: missing {json.dumps(row)[:300]}")
            else:
                lines.append(f"{table} {_key(row)}: {'; '.join(_changed(row, other))}")
        lines += [f"{table}: extra {json.dumps(r)[:300]}" for r in extra.values()]
    return lines
