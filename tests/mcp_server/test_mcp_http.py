"""`memctl mcp --http` on loopback: bearer tokens (stored hashed) map callers to their scope.

One server process serves two tenants' callers; the SDK's real ClientSession talks to it over
Streamable HTTP with an httpx2 client carrying the token.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.mcp_server.auth import hash_token
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores
from tests.conftest import episode, lines_of
from tests.kit.mcp import (
    error_text,
    free_port,
    http_session,
    result_json,
    start_http_server,
    stop,
)

# no DuckDB instance kept open by the test process (tests/kit/duckdb_instances.py):
# the MCP server process opens the home while the test reads it
KEEP_DUCKDB_INSTANCES = False

TOKENS = {
    "acme": "tok-acme-" + "a" * 20,  # tenant acme, any subject
    "globex": "tok-globex-" + "b" * 20,  # tenant globex, bound to subject bob
    "reader": "tok-reader-" + "c" * 20,  # tenant acme, memory_recall only
}


def _config(path: Path) -> Path:
    entries = [
        ("acme", "acme", None, None),
        ("globex", "globex", "bob", None),
        ("reader", "acme", None, ["memory_recall"]),
    ]
    lines = ["[embed]", 'model = "hash"', ""]
    for name, tenant, subject, tools in entries:
        lines += ["[[mcp.tokens]]", f'name = "{name}"', f'sha256 = "{hash_token(TOKENS[name])}"']
        lines.append(f'tenant = "{tenant}"')
        if subject:
            lines.append(f'subject = "{subject}"')
        if tools:
            lines.append("tools = [" + ", ".join(f'"{t}"' for t in tools) + "]")
        lines.append("")
    path.write_text("\n".join(lines))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    root = tmp_path_factory.mktemp("mcp-http")
    config = _config(root / "memctl.toml")
    home = root / "home"
    store_settings = load_settings(home=home, embed={"model": "hash"})
    stores = open_stores(store_settings)
    seed = [
        episode(episode_id="a1", tenant_id="acme", subject_id="ann"),
        episode(episode_id="g1", tenant_id="globex", subject_id="bob"),
        episode(episode_id="g2", tenant_id="globex", subject_id="carl"),
    ]
    ingest_records(
        stores, store_settings, RunContext(), lines_of(*seed), embedder=HashEmbedder(384)
    )
    port = free_port()
    proc = start_http_server(home, config, port)
    try:
        yield port
    finally:
        stop(proc)


def test_no_or_unknown_token_is_refused_before_any_tool(server):
    url = f"http://127.0.0.1:{server}/mcp"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    for extra in ({}, {"Authorization": "Bearer not-a-token"}):
        response = httpx2.post(url, json=body, headers={**headers, **extra}, timeout=10)
        assert response.status_code == 401


def test_tokens_limit_tools_and_subjects(server):
    async def run():
        async with http_session(server, TOKENS["reader"]) as s:
            refused = await s.call_tool("memory_save", {"text": "x", "subject_id": "ann"})
            allowed = await s.call_tool("memory_recall", {"query": "vpn", "subject_id": "ann"})
        async with http_session(server, TOKENS["globex"]) as s:
            other = await s.call_tool("memory_recall", {"query": "vpn", "subject_id": "carl"})
            own = await s.call_tool("memory_recall", {"query": "VPN fails with error 720"})
            bad = await s.call_tool("memory_recall", {"query": "vpn", "k": -1})
        return refused, allowed, other, own, bad

    refused, allowed, other, own, bad = anyio.run(run)
    assert "not allowed for this caller (reader)" in error_text(refused)
    assert [r["episode_id"] for r in result_json(allowed)["records"]] == ["a1"]
    assert "bound to another subject" in error_text(other)
    assert [r["episode_id"] for r in result_json(own)["records"]] == ["g1"]
    assert "k must be between" in error_text(bad)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1),
    subject=st.sampled_from(["ann", "bob", "x' OR tenant_id = 'globex"]),
)
def test_two_tokens_never_see_each_others_tenant(server, text, subject):
    key = uuid.uuid4().hex
    # a word of this example's own: a save waits for the embed task, so until then recall finds
    # it by its words (a text such as ":" has none); the odd characters stay in the text
    text = f"{key[:12].translate(str.maketrans('0123456789', 'ghijklmnop'))} {text}"

    async def run():
        async with (
            http_session(server, TOKENS["acme"]) as a,
            http_session(server, TOKENS["globex"]) as g,
        ):
            saved_a = result_json(
                await a.call_tool("memory_save", {"text": text, "subject_id": subject, "key": key})
            )
            saved_g = result_json(await g.call_tool("memory_save", {"text": text, "key": key}))
            seen = {}
            for name, session, subj in (("acme", a, subject), ("globex", g, None)):
                recall = await session.call_tool(
                    "memory_recall", {"query": text, "subject_id": subj, "k": 50}
                )
                facts = await session.call_tool("memory_facts", {"subject_id": subj})
                seen[name] = result_json(recall)["records"] + result_json(facts)["records"]
            return saved_a, saved_g, seen

    saved_a, saved_g, seen = anyio.run(run)
    assert saved_a["episode_id"] != saved_g["episode_id"]
    assert {r["tenant_id"] for r in seen["acme"]} <= {"acme"}
    assert {r["tenant_id"] for r in seen["globex"]} <= {"globex"}
    assert all(r.get("subject_id") in (None, "bob") for r in seen["globex"])
    # each sees its own save: the property is not vacuous
    assert saved_a["episode_id"] in {r.get("episode_id") for r in seen["acme"]}
    assert saved_g["episode_id"] in {r.get("episode_id") for r in seen["globex"]}
