"""memctl: each command loads config, opens stores, calls one stage and prints its result.

Expected errors print ``Error: ...`` on stderr with exit status 1 and no traceback, in one
place (``main``). ``--format json`` prints exactly one JSON document on stdout.
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
from memory_core.context import RunContext
from memory_core.errors import MemoryCoreError

app = typer.Typer(
    help="Turn agents' episodes into trustworthy long-term memory, and forget what should go.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)


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


@app.callback()
def _root(home: HomeOpt = None, config: ConfigOpt = None) -> None:
    """Global options; every command also accepts --home and --config after its name."""
    _state["home"] = home
    _state["config"] = config


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


def open_all(settings: Settings) -> Any:
    from memory_core.stores import open_stores

    return open_stores(settings)


@app.command()
def init(
    home: HomeOpt = None, config: ConfigOpt = None, fmt: FormatOpt = OutputFormat.text
) -> None:
    """Create the Lance tables (with scalar indices) and migrate the DuckDB control plane."""
    from memory_core.embed import make_embedder
    from memory_core.stores.meta import latest_schema_version

    settings = settings_for(home, config)
    stores = open_all(settings)
    embedder = make_embedder(settings.embed)
    created = stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    emit(
        {
            "home": str(settings.home),
            "lance_uri": settings.lance_uri,
            "meta_path": str(settings.meta_path),
            "created_tables": created,
            "schema_version": latest_schema_version(),
            "embedder": embedder.version,
        },
        fmt,
    )


@app.command()
def ingest(
    file: Annotated[
        Path, typer.Argument(help="JSONL file of episodes", exists=True, dir_okay=False)
    ],
    quarantine: Annotated[
        bool, typer.Option("--quarantine", help="write good lines, quarantine bad ones")
    ] = False,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Validate, redact and store episodes; all-or-nothing unless --quarantine."""
    from memory_core.embed import make_embedder
    from memory_core.stages.ingest import ingest_file

    settings = settings_for(home, config)
    stores = open_all(settings)
    ctx = RunContext(now=parse_now(now))
    result = ingest_file(
        stores, settings, ctx, file, embedder=make_embedder(settings.embed), quarantine=quarantine
    )
    emit(result.as_dict(), fmt)


@app.command()
def status(
    home: HomeOpt = None, config: ConfigOpt = None, fmt: FormatOpt = OutputFormat.text
) -> None:
    """Row counts per table and status, and the last runs."""
    from memory_core.status import collect_status

    settings = settings_for(home, config)
    emit(collect_status(open_all(settings)), fmt)


def _prefect_env(settings: Settings) -> None:
    """Prefect reads its settings at import: point it at a home-local, offline setup first."""
    prefect_home = (settings.home / "prefect").resolve()
    prefect_home.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PREFECT_HOME", str(prefect_home))
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_ENABLED", "false")


@app.command()
def consolidate(
    now: NowOpt = None,
    recluster: Annotated[
        bool, typer.Option("--recluster", help="rebuild clusters, keeping ids stable")
    ] = False,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Run the nightly consolidation flow once, through Prefect."""
    settings = settings_for(home, config)
    _prefect_env(settings)
    from flows.nightly import run_nightly

    summary = run_nightly(settings, now=parse_now(now), recluster=recluster)
    emit(summary, fmt)


@app.command()
def demo(
    seed: Annotated[int, typer.Option(help="random seed of the generated data")] = 7,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Generate the seeded multi-tenant demo, ingest it and run consolidation once."""
    settings = settings_for(home, config)
    _prefect_env(settings)
    from memory_core.demo.run import run_demo

    emit(run_demo(settings, seed=seed, now=parse_now(now) if now else None), fmt)


def main() -> None:
    """Entry point: expected errors become one line on stderr and exit status 1."""
    try:
        app(standalone_mode=False)
    except MemoryCoreError as exc:
        console.print(f"[red]Error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except typer.Abort:
        console.print("Aborted.")
        sys.exit(1)
    except Exception as exc:  # click usage errors arrive here in standalone_mode=False
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
