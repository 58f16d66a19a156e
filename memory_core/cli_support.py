"""What every memctl command shares: options, the clock, settings, stores and output.

Command modules (memory_core/commands/*) import from here, never from cli.py, so the CLI can
register them without import cycles.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from memory_core.config import Settings, load_settings


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", help="memctl home (default $MEMCTL_HOME or ./data)", show_default=False),
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="TOML config file (see configs/default.toml)")
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="text or json")]
NowOpt = Annotated[
    str | None, typer.Option("--now", help="the run's clock, RFC3339 (default: now)")
]

_state: dict[str, Any] = {}


def settings_for(home: Path | None = None, config: Path | None = None) -> Settings:
    return load_settings(
        config_file=config or _state.get("config"), home=home or _state.get("home")
    )


def parse_now(now: str | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    try:
        value = datetime.fromisoformat(now.replace("Z", "+00:00"))
    except ValueError as exc:
        msg = f"--now {now!r} is not RFC3339 (e.g. 2026-07-01T00:00:00Z)"
        raise typer.BadParameter(msg) from exc
    if value.tzinfo is None:
        msg = f"--now {now!r} has no timezone offset"
        raise typer.BadParameter(msg)
    return value.astimezone(UTC)


def emit(data: Any, fmt: OutputFormat, *, title: str = "") -> None:
    """Print ``data`` as one JSON document, or as a readable table/summary."""
    if fmt is OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2, default=str, sort_keys=False) + "\n")
        return
    out = Console()
    if isinstance(data, list) and data and isinstance(data[0], dict):
        table = Table(title=title or None)
        keys = list(data[0].keys())[:8]
        for key in keys:
            table.add_column(key)
        for row in data:
            table.add_row(*[_short(row.get(k)) for k in keys])
        out.print(table)
    elif isinstance(data, dict):
        for key, value in data.items():
            out.print(f"[bold]{key}[/bold]: {_short(value, 200)}")
    elif isinstance(data, list):
        out.print(f"{title or 'results'}: none")
    else:
        out.print(data)


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def prefect_env(settings: Settings) -> None:
    """Prefect reads its settings at import: point it at a home-local, offline setup first."""
    prefect_home = (settings.home / "prefect").resolve()
    prefect_home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(prefect_home))
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")
    from memory_core.logging_setup import quiet_expected_errors

    quiet_expected_errors()  # the command prints our errors as one line: no Prefect traceback
    if os.environ.get("MEMCTL_LOG_FORMAT") == "json":  # flows log JSON lines too
        from memory_core import logging_setup

        logging_setup.prefect_logging(prefect_home)
    # the ephemeral server Prefect starts for this command exits with it, even SIGKILLed
    from memory_core.orchestration import orchestrator

    orchestrator().register_ephemeral_server()


def open_all(settings: Settings) -> Any:
    from memory_core.stores import open_stores

    return open_stores(settings)
