"""`memctl mcp` over stdio, driven by the SDK's real ClientSession against a demo home.

The demo home is one tenant of the seeded demo after a night (hash embedder): its approved
procedures are what an agent should get back for a stated state.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.stages.forget import process_deletion_requests
from memory_core.stores import open_stores
from tests.kit.mcp import (
    DEMO_TENANT,
    build_demo_home,
    error_text,
    result_json,
    stdio_session,
)

# no DuckDB instance kept open by the test process (tests/kit/duckdb_instances.py):
# the MCP server process opens the home while the test reads it
KEEP_DUCKDB_INSTANCES = False

TOOLS = {
    "memory_recall",
    "memory_save",
    "memory_facts",
    "memory_procedures",
    "memory_forget_me",
    "memory_deletion_status",
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    home, now, truth = build_demo_home(tmp_path_factory.mktemp("mcp-demo"))
    return home, now.isoformat(), truth


@pytest.fixture
def demo_copy(demo, tmp_path: Path) -> tuple[Path, str, dict]:
    """A copy of the demo home a test may change."""
    home, now, truth = demo
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    return copy, now, truth


def _procedures(home: Path, truth: dict) -> list[dict]:
    """The demo's true procedures the night promoted with their true preconditions."""
    rows = open_stores(load_settings(home=home)).lance.scan(
        "procedures", columns=["steps", "preconditions"]
    )
    promoted = {
        (tuple(r["steps"]), json.dumps(json.loads(r["preconditions"]), sort_keys=True))
        for r in rows.to_pylist()
    }
    return [
        p for p in truth["procedures"]
        if p["tenant_id"] == DEMO_TENANT
        and (tuple(p["steps"]), json.dumps(p["preconditions"], sort_keys=True)) in promoted
    ]  # fmt: skip


def test_lists_six_tools_with_schemas_and_annotations(demo):
    home, now, _ = demo

    async def run():
        async with stdio_session(home, "--tenant", DEMO_TENANT, "--now", now) as s:
            tools = (await s.list_tools()).tools
            templates = (await s.list_resource_templates()).resource_templates
            facts = await s.read_resource("memory://facts/it-support")
            procedures = await s.read_resource("memory://procedures/it-support")
            return tools, templates, facts, procedures

    listed, templates, facts, procedures = anyio.run(run)
    tools = {t.name: t for t in listed}
    assert set(tools) == TOOLS
    assert {t.uri_template for t in templates} == {
        "memory://facts/{namespace}",
        "memory://procedures/{namespace}",
    }
    fact_rows = json.loads(facts.contents[0].text)
    assert fact_rows and all(r["tenant_id"] == DEMO_TENANT for r in fact_rows)
    assert all(r["subject_id"] is None for r in fact_rows)  # unbound: tenant scope only
    # without a state, only procedures with no preconditions apply (none in the demo)
    assert json.loads(procedures.contents[0].text) == []
    recall = tools["memory_recall"]
    assert recall.input_schema["required"] == ["query"]
    assert "tenant_id" not in recall.input_schema["properties"]  # never an argument
    assert {"query", "subject_id", "type", "k", "budget_tokens", "as_of", "state"} <= set(
        recall.input_schema["properties"]
    )
    for name in ("memory_recall", "memory_facts", "memory_procedures", "memory_deletion_status"):
        assert tools[name].annotations.read_only_hint is True, name
    assert tools["memory_forget_me"].annotations.destructive_hint is True
    assert tools["memory_save"].annotations.read_only_hint is False
    assert tools["memory_save"].annotations.destructive_hint is False


def test_recall_returns_the_procedure_for_the_stated_state(demo):
    home, now, truth = demo
    expected = _procedures(home, truth)
    assert len(expected) >= 3

    async def run():
        out = []
        async with stdio_session(home, "--tenant", DEMO_TENANT, "--now", now) as s:
            for proc in expected:
                state = {**proc["context"], **proc["preconditions"]}
                args = {"query": proc["goal"], "type": "procedural", "state": state, "k": 3}
                recall = result_json(await s.call_tool("memory_recall", args))
                listed = result_json(await s.call_tool("memory_procedures", {"state": state}))
                out.append((proc, recall, listed))
        return out

    for proc, recall, listed in anyio.run(run):
        assert recall["records"], proc["name"]
        top = recall["records"][0]
        assert top["steps"] == proc["steps"], proc["name"]
        assert top["memory_type"] == "procedural"
        assert top["tenant_id"] == DEMO_TENANT
        assert top["reason"] and top["tokens"] >= 1
        assert recall["used_tokens"] == sum(r["tokens"] for r in recall["records"])
        qr = recall["query_record"]
        assert qr["tenant_id"] == DEMO_TENANT and qr["selected"][0] == top["record_id"]
        # the problem's other procedures are left out, each for its unmet precondition
        unmet = [e for e in qr["left_out"] if e["reason"].startswith("precondition not met")]
        assert unmet, proc["name"]
        assert [r["steps"] for r in listed["records"]] == [proc["steps"]], proc["name"]


def test_bad_arguments_give_one_line_errors(demo):
    home, now, _ = demo

    async def run():
        calls = [
            ("memory_recall", {"query": "vpn", "k": 0}),
            ("memory_recall", {"query": "vpn", "k": "many"}),
            ("memory_recall", {"query": "vpn", "as_of": "2026-07-01T00:00:00"}),
            ("memory_recall", {"query": "vpn", "as_of": "yesterday"}),
            ("memory_recall", {"query": "vpn", "type": "gossip"}),
            ("memory_recall", {"query": "vpn", "state": {"os": 11}}),
            ("memory_recall", {"query": "vpn", "budget_tokens": 10**9}),
            ("memory_recall", {}),
            ("memory_save", {"text": "x", "subject_id": "u1", "source_role": "user"}),
            ("memory_save", {"text": "x", "subject_id": "u1", "source_role": "system"}),
            ("memory_save", {"subject_id": "u1"}),
            ("memory_save", {"text": "x"}),  # no subject on an unbound server
            ("memory_save", {"text": "x", "subject_id": "u1", "occurred_at": "2026-07-01"}),
            ("memory_save", {"text": "x", "subject_id": "u1", "actions": [{"tool": ""}]}),
            ("memory_save", {"text": "x", "messages": [{"role": "user", "content": "y"}]}),
            ("memory_save", {"messages": [{"content": "no role"}], "subject_id": "u1"}),
            ("memory_forget_me", {}),
            ("memory_deletion_status", {"request_id": "del_nope"}),
            ("memory_facts", {"known_at": "2026-07-01T00:00:00"}),
            ("memory_procedures", {"state": ["os", "win11"]}),
        ]
        async with stdio_session(home, "--tenant", DEMO_TENANT, "--now", now) as s:
            return [(name, args, await s.call_tool(name, args)) for name, args in calls]

    results = anyio.run(run)
    for name, args, result in results:
        text = error_text(result)
        assert "Traceback" not in text, (name, args, text)
        assert len(text) < 2000, (name, args)
    by_call = {(n, str(a)): r.content[0].text for n, a, r in results}
    assert "k must be between 1 and" in by_call[("memory_recall", str({"query": "vpn", "k": 0}))]
    assert (
        "source_role 'user' is not allowed"
        in by_call[("memory_save", str({"text": "x", "subject_id": "u1", "source_role": "user"}))]
    )
    assert (
        "no timezone offset"
        in by_call[("memory_recall", str({"query": "vpn", "as_of": "2026-07-01T00:00:00"}))]
    )
    assert "subject_id is required" in by_call[("memory_save", str({"text": "x"}))]


def test_filter_values_are_quoted_not_interpreted(demo):
    """A subject or namespace full of SQL reaches the filter as one escaped literal."""
    home, now, _ = demo
    sneaky = "x' OR tenant_id <> 'none"

    async def run():
        async with stdio_session(home, "--tenant", DEMO_TENANT, "--now", now) as s:
            recall = await s.call_tool("memory_recall", {"query": "vpn", "subject_id": sneaky})
            facts = await s.call_tool("memory_facts", {"namespace": sneaky})
            return result_json(recall), result_json(facts)

    recall, facts = anyio.run(run)
    assert all(r["tenant_id"] == DEMO_TENANT for r in recall["records"])
    assert all(r.get("subject_id") in (None, sneaky) for r in recall["records"])
    assert facts["records"] == []


def test_subject_bound_server_refuses_another_subject(demo):
    home, now, _ = demo

    async def run():
        async with stdio_session(
            home, "--tenant", DEMO_TENANT, "--subject", "chen.silva", "--now", now
        ) as s:
            other = await s.call_tool("memory_recall", {"query": "vpn", "subject_id": "jordan.lee"})
            mine = await s.call_tool("memory_facts", {})
            forget = await s.call_tool("memory_forget_me", {"subject_id": "jordan.lee"})
            return other, result_json(mine), forget

    other, mine, forget = anyio.run(run)
    assert "bound to another subject" in error_text(other)
    assert "bound to another subject" in error_text(forget)
    assert all(r.get("subject_id") in (None, "chen.silva") for r in mine["records"])


def test_missing_store_is_memory_unavailable_not_empty(tmp_path: Path):
    async def run():
        async with stdio_session(tmp_path / "nowhere", "--tenant", "acme") as s:
            return [
                await s.call_tool("memory_recall", {"query": "vpn"}),
                await s.call_tool("memory_facts", {}),
                await s.call_tool("memory_procedures", {}),
                await s.call_tool("memory_save", {"text": "x", "subject_id": "u1"}),
                await s.call_tool("memory_forget_me", {"subject_id": "u1"}),
            ]

    for result in anyio.run(run):
        assert "memory unavailable" in error_text(result)


def test_save_is_tentative_gated_and_marked(demo_copy):
    home, now, _ = demo_copy
    secret = "sk-ant-" + "a1B2" * 10
    chat = [
        {"role": "user", "content": "I prefer dark mode. My key is " + secret},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ]
    calls = [
        {"role": "user", "content": "Cancel reservation R1"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "cancel", "arguments": '{"reservation_id": "R1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "cancelled"},
    ]

    async def run():
        async with stdio_session(home, "--tenant", DEMO_TENANT, "--now", now) as s:
            args = {"messages": chat, "subject_id": "chen.silva", "key": "k1"}
            first = result_json(await s.call_tool("memory_save", args))
            again = result_json(await s.call_tool("memory_save", args))
            once = {"text": "one", "subject_id": "chen.silva", "key": "k2"}
            result_json(await s.call_tool("memory_save", once))
            clash = await s.call_tool("memory_save", {**once, "text": "other"})
            run = result_json(
                await s.call_tool(
                    "memory_save",
                    {"messages": calls, "subject_id": "chen.silva", "outcome": "success"},
                )
            )
            return first, again, clash, run

    first, again, clash, tools_run = anyio.run(run)
    assert first["status"] == "inserted" and first["tentative"] is True
    assert first["inserted"] == 2 and first["roles_downgraded"] == 1  # the user's message
    assert again == {**first, "status": "unchanged", "inserted": 0, "unchanged": 2,
                     "commit_attempts": 0}  # fmt: skip
    assert "already saved with other content" in error_text(clash)
    settings = load_settings(home=home)
    stores = open_stores(settings)
    with stores.meta.connect() as con:  # written when the server stopped, counts only
        audit = con.execute(
            "SELECT actor, tenant_id, counts, target FROM audit_log WHERE action = 'mcp_save'"
        ).fetchall()
    assert [(a, t, g) for a, t, _, g in audit] == [("mcp:stdio", DEMO_TENANT, "mcp")]
    counts = json.loads(audit[0][2])
    assert (counts["saves"], counts["inserted"], counts["unchanged"]) == (4, 7, 2)
    assert counts["redactions"] >= 1
    ids = ", ".join(f"'{i}'" for i in first["episode_ids"] + tools_run["episode_ids"])
    rows = {
        r["episode_id"]: r
        for r in stores.lance.scan("episodes", where=f"episode_id IN ({ids})").to_pylist()
    }
    said = rows[first["episode_ids"][0]]
    assert said["tenant_id"] == DEMO_TENANT and said["subject_id"] == "chen.silva"
    assert said["source_role"] == "agent" and said["authority"] == "agent_inference"
    assert secret not in said["text"] and said["redactions"] >= 1
    assert all('"source_kind":"mcp"' in r["provenance"] for r in rows.values())
    assert {r["source_role"] for r in rows.values()} <= {"agent", "tool"}  # never the user's
    trajectory = rows[tools_run["episode_id"]]
    assert trajectory["actions"] == ['{"args":{"reservation_id":"R1"},"tool":"cancel"}']
    assert trajectory["outcome"] == "success"
    assert stores.lance.count("facts", "text LIKE '%dark mode%'") == 0  # never a fact by saving


def test_forget_me_then_the_deletion_schedule_leaves_nothing(demo_copy):
    home, _, _ = demo_copy
    subject = "chen.silva"
    settings = load_settings(home=home)
    stores = open_stores(settings)
    assert stores.lance.count("episodes", f"subject_id = '{subject}'") > 0

    async def ask():
        async with stdio_session(home, "--tenant", DEMO_TENANT, "--subject", subject) as s:
            filed = result_json(await s.call_tool("memory_forget_me", {}))
            status = result_json(
                await s.call_tool("memory_deletion_status", {"request_id": filed["request_id"]})
            )
            return filed, status

    filed, pending = anyio.run(ask)
    assert pending["status"] == "pending" and pending["receipt"] is None

    # the deletion-requests schedule runs this stage (flows/forgetting.py)
    receipts = process_deletion_requests(stores, settings, RunContext())
    assert len(receipts) == 1

    async def check():
        async with stdio_session(home, "--tenant", DEMO_TENANT, "--subject", subject) as s:
            status = result_json(
                await s.call_tool("memory_deletion_status", {"request_id": filed["request_id"]})
            )
            recall = result_json(await s.call_tool("memory_recall", {"query": "vpn error"}))
            return status, recall

    status, recall = anyio.run(check)
    assert all(r.get("subject_id") != subject for r in recall["records"])
    for table in ("episodes", "facts", "procedures", "digests"):
        assert stores.lance.count(table, f"subject_id = '{subject}'") == 0, table
    receipt = status["receipt"]
    assert subject not in json.dumps(receipt)  # the receipt names the subject by hash only
    assert receipt["verification"]["versions_checked"]
    assert status["status"] == "done"
    assert receipt["verification"]["verified"] is True
