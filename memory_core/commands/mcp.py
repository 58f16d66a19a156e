"""memctl mcp: the memory server agents reach over MCP (memory_core/mcp_server).

``memctl mcp --tenant T`` serves stdio (the agent's MCP client starts it as a subprocess);
``memctl mcp --http 127.0.0.1:8765`` serves Streamable HTTP at ``/mcp`` to callers holding a
bearer token from ``[[mcp.tokens]]``; ``memctl mcp --new-token NAME --tenant T`` makes one.
Stdout belongs to the protocol on stdio: everything else goes to stderr.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from memory_core.cli_context import command_context
from memory_core.cli_support import ConfigOpt, HomeOpt, NowOpt


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        msg = f"--http {value!r} must be HOST:PORT (e.g. 127.0.0.1:8765)"
        raise typer.BadParameter(msg)
    return host.strip("[]"), int(port)


def mcp_command(
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="the tenant a stdio server serves")
    ] = None,
    subject: Annotated[
        str | None, typer.Option("--subject", help="bind a stdio server to one subject")
    ] = None,
    http: Annotated[
        str | None,
        typer.Option("--http", help="serve Streamable HTTP at HOST:PORT (bearer tokens)"),
    ] = None,
    new_token: Annotated[
        str | None,
        typer.Option("--new-token", help="print a new token for NAME and its config entry"),
    ] = None,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the memory tools over MCP: stdio by default, Streamable HTTP with --http."""
    from memory_core.mcp_server.auth import Binding, TokenTable
    from memory_core.mcp_server.auth import new_token as make_token

    if new_token is not None:
        if not tenant:
            msg = "--new-token needs --tenant T (the only tenant the token reaches)"
            raise typer.BadParameter(msg)
        token, digest = make_token()
        entry = {"name": new_token, "sha256": digest, "tenant": tenant}
        if subject:
            entry["subject"] = subject
        lines = ["[[mcp.tokens]]", *(f"{k} = {json.dumps(v)}" for k, v in entry.items())]
        print("\n".join(lines))
        print(f"token (shown once, give it to the client): {token}", file=sys.stderr)
        return

    cmd = command_context(home, config, now)
    settings, clock_at = cmd.settings, cmd.clock_given
    from memory_core.mcp_server import MemoryService, run_http, run_stdio

    service = MemoryService(settings, clock=(lambda: clock_at) if clock_at else None)
    if http is not None:
        host, port = _host_port(http)
        tokens = TokenTable.from_config(settings.mcp)
        if not tokens.bindings:
            msg = "--http needs [[mcp.tokens]] in the config (make one: memctl mcp --new-token)"
            raise typer.BadParameter(msg)
        print(f"memctl mcp: Streamable HTTP at http://{host}:{port}/mcp", file=sys.stderr)
        run_http(service, tokens, host=host, port=port)
        return
    try:
        binding = Binding(
            tenant_id=tenant or settings.mcp.tenant,
            subject_id=subject,
            save_roles=frozenset(settings.mcp.save_roles),
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    run_stdio(service, binding)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the memctl app."""
    app.command(name="mcp")(mcp_command)
