# ruff: noqa: FBT002  (typer options are booleans by design, as in cli.py)
"""memctl serve: the schedules (flows/deployments.py) served from one process, via Prefect.

Prefect is imported only when the command runs (memory_core never imports it at import time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from memory_core.cli_context import command_context
from memory_core.cli_support import ConfigOpt, HomeOpt
from memory_core.orchestration import orchestrator


def serve(
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="serve only this deployment (repeatable): nightly-consolidation, forgetting, "
            "deletion-requests, review-dispatch, promotion-review",
        ),
    ] = None,
    interval: Annotated[
        float | None,
        typer.Option(
            "--interval", help="fire every N seconds instead of the crons (to try it out)", min=1
        ),
    ] = None,
    port: Annotated[
        int, typer.Option("--port", help="port of the local Prefect server started for you")
    ] = 4200,
    start_server: Annotated[
        bool,
        typer.Option(
            "--start-server/--no-start-server",
            help="start a local Prefect server when PREFECT_API_URL is unset",
        ),
    ] = True,
    write_yaml: Annotated[
        Path | None,
        typer.Option(
            "--write-prefect-yaml",
            help="write prefect.yaml for this config and exit",
            dir_okay=False,
        ),
    ] = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Serve the schedules: nightly consolidation, forgetting after it, deletion requests
    every 15 minutes, promotion review (crons from \\[schedule], in the config's timezone)."""
    cmd = command_context(home, config)
    settings = cmd.settings
    err = Console(stderr=True)

    def say(text: str) -> None:
        err.print(f"memctl serve: {text}", highlight=False, soft_wrap=True)

    cmd.prefect()
    if write_yaml is not None:
        write_yaml.write_text(orchestrator().render_prefect_yaml(settings))
        say(f"wrote {write_yaml}")
        return
    select, serve_deployments = orchestrator().select, orchestrator().serve_deployments

    try:
        select(only)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--only") from exc
    serve_deployments(
        settings,
        names=only,
        interval_s=interval,
        port=port,
        start_server=start_server,
        config=cmd.config_file,
        say=say,
    )


def register(app: typer.Typer) -> None:
    app.command()(serve)
