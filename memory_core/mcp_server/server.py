"""Build and run the memory MCP server (the official ``mcp`` SDK, v2 ``MCPServer``).

Two ways to bind callers to a scope:

* stdio (``memctl mcp --tenant T``): the process belongs to one caller, so the server is
  bound to one ``Binding`` for its lifetime.
* Streamable HTTP (``memctl mcp --http HOST:PORT``): every request carries a bearer token;
  the SDK's bearer middleware asks ``TokenTable.verify_token`` (hashes in config) and refuses
  unknown tokens with 401 before any tool runs; each tool call then finds its binding from
  the token the request carried. Sessions are bound to the token that opened them (SDK).
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from memory_core.mcp_server.auth import Binding, TokenTable
from memory_core.mcp_server.memory import MemoryService
from memory_core.mcp_server.tools import register_tools

__all__ = ["build_http_server", "build_stdio_server", "run_http", "run_stdio"]

logger = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Long-term memory for this tenant. memory_recall before acting on anything you may have "
    "done before (pass state for procedures); memory_save after an episode worth learning "
    "from (it is tentative: the nightly run decides what becomes memory); memory_forget_me "
    "when the user asks to be forgotten."
)


def build_stdio_server(service: MemoryService, binding: Binding) -> MCPServer:
    """A server whose every call acts in ``binding``."""
    server = MCPServer("memory-core", instructions=INSTRUCTIONS, log_level="WARNING")
    register_tools(server, service, lambda _ctx: binding)
    return server


def _token_of(ctx: Context | None) -> Any:
    request = None
    if ctx is not None:
        try:
            request = ctx.request_context.request
        except ValueError:
            request = None
    user = getattr(request, "scope", {}).get("user") if request is not None else None
    token = getattr(user, "access_token", None)
    return token if token is not None else get_access_token()


def build_http_server(service: MemoryService, tokens: TokenTable, *, url: str) -> MCPServer:
    """A server that maps each request's bearer token to its binding."""

    def resolve(ctx: Context | None) -> Binding:
        token = _token_of(ctx)
        binding = tokens.bindings.get(token.client_id) if token is not None else None
        if binding is None:  # the middleware already refused it; never fall back to a scope
            msg = "unauthenticated: send Authorization: Bearer <token>"
            raise ToolError(msg)
        return binding

    auth = AuthSettings(
        issuer_url=url, resource_server_url=None, required_scopes=["memory"]
    )  # tokens are issued out of band (memctl mcp --new-token), not by an OAuth server
    server = MCPServer(
        "memory-core",
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        token_verifier=tokens,
        auth=auth,
    )
    register_tools(server, service, resolve)
    return server


def run_stdio(service: MemoryService, binding: Binding) -> None:
    try:
        build_stdio_server(service, binding).run()
    finally:
        service.close()


def run_http(service: MemoryService, tokens: TokenTable, *, host: str, port: int) -> None:
    import anyio

    server = build_http_server(service, tokens, url=f"http://{host}:{port}")
    try:
        anyio.run(
            lambda: server.run_streamable_http_async(host=host, port=port, json_response=True)
        )
    finally:
        service.close()
