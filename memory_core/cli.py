"""memctl: each command loads config, opens stores, calls one stage and prints its result.

Expected errors print ``Error: ...`` on stderr with exit status 1 and no traceback, in one
place (``main``). ``--format json`` prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from memory_core.cli_context import command_context
from memory_core.cli_support import (
    ConfigOpt,
    FormatOpt,
    HomeOpt,
    NowOpt,
    OutputFormat,
    _state,
    emit,
)
from memory_core.errors import MemoryCoreError
from memory_core.orchestration import orchestrator

app = typer.Typer(
    help="Turn agents' episodes into trustworthy long-term memory, and forget what should go.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)


@app.callback()
def _root(
    home: HomeOpt = None,
    config: ConfigOpt = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="text or json (JSON lines on stderr, flows too); default $MEMCTL_LOG_FORMAT",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Global options; every command also accepts --home and --config after its name."""
    from memory_core.logging_setup import configure_logging
    from memory_core.logging_setup import log_format as resolve_log_format

    _state["home"] = home
    _state["config"] = config
    try:
        configure_logging(resolve_log_format(log_format))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--log-format") from exc


@app.command()
def init(
    home: HomeOpt = None, config: ConfigOpt = None, fmt: FormatOpt = OutputFormat.text
) -> None:
    """Create the Lance tables (with scalar indices) and migrate the DuckDB control plane."""
    from memory_core.embed import make_embedder
    from memory_core.stores.meta import latest_schema_version

    cmd = command_context(home, config)
    settings, stores = cmd.settings, cmd.stores
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
    source_format: Annotated[
        str,
        typer.Option(
            "--from",
            help="episodes (contract v1), or one chat session per line: openai-chat, "
            "anthropic-messages",
        ),
    ] = "episodes",
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Validate, redact and store episodes; all-or-nothing unless --quarantine.

    With --from openai-chat or anthropic-messages each line is one session
    {session_id, tenant_id, subject_id, namespace?, started_at?, outcome?, messages}: every
    message becomes an episode, and a session with tool calls one trajectory episode too.
    """
    from memory_core.embed import make_embedder
    from memory_core.stages.ingest import ingest_file
    from memory_core.transcripts import TranscriptFormat

    try:
        transcript = TranscriptFormat(source_format)
    except ValueError:
        choices = ", ".join(f.value for f in TranscriptFormat)
        msg = f"--from must be one of {choices}, got {source_format!r}"
        raise typer.BadParameter(msg, param_hint="--from") from None
    cmd = command_context(home, config, now)
    settings, stores, ctx = cmd.settings, cmd.stores, cmd.run()
    if transcript is not TranscriptFormat.episodes:
        from memory_core.cli_progress import byte_bar
        from memory_core.transcripts.ingest import ingest_transcripts

        with byte_bar(fmt, f"ingest {file.name}", file.stat().st_size) as progress:
            result = ingest_transcripts(
                stores, settings, ctx, file, fmt=transcript,
                embedder=make_embedder(settings.embed), quarantine=quarantine, progress=progress,
            )  # fmt: skip
        emit(result.as_dict(), fmt)
        return
    from memory_core.cli_progress import byte_bar

    with byte_bar(fmt, f"ingest {file.name}", file.stat().st_size) as progress:
        result = ingest_file(
            stores, settings, ctx, file, embedder=make_embedder(settings.embed),
            quarantine=quarantine, progress=progress,
        )  # fmt: skip
    emit(result.as_dict(), fmt)


@app.command()
def embed(
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="embed at most N pending episodes (default: all)"),
    ] = None,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Fill the vectors of episodes stored without one (ingest leaves them to this, or to the
    nightly's embed task): through the embedding cache, in batches, one commit each."""
    from memory_core.embed import make_embedder
    from memory_core.stages.embed import embed_episodes, pending_embedding

    cmd = command_context(home, config, now)
    settings, stores, ctx = cmd.settings, cmd.stores, cmd.run()
    if not pending_embedding(stores):  # nothing to do: no model load
        emit({"pending_before": 0, "embedded": 0, "pending_after": 0}, fmt)
        return
    result = embed_episodes(
        stores, settings, ctx, embedder=make_embedder(settings.embed), limit=limit
    ).as_dict()
    result["pending_after"] = pending_embedding(stores)
    emit(result, fmt)


@app.command()
def status(
    home: HomeOpt = None, config: ConfigOpt = None, fmt: FormatOpt = OutputFormat.text
) -> None:
    """Row counts per table and status, and the last runs."""
    from memory_core.status import collect_status

    emit(collect_status(command_context(home, config).stores), fmt)


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
    cmd = command_context(home, config, now)
    settings = cmd.prefect()
    summary = orchestrator().run_nightly(settings, now=cmd.clock, recluster=recluster)
    emit(summary, fmt)


@app.command()
def candidates(
    status_filter: Annotated[
        str | None, typer.Option("--status", help="pending_review, auto_rejected, ...")
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="only this tenant")] = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """List candidate memories with their evidence, statistics and status."""
    from memory_core.models import CandidateStatus
    from memory_core.stores.candidates import list_candidates

    if status_filter is not None and status_filter not in CandidateStatus.__members__:
        msg = f"--status must be one of {', '.join(CandidateStatus.__members__)}"
        raise typer.BadParameter(msg)
    stores = command_context(home, config).stores
    rows = list_candidates(stores.meta, status=status_filter, tenant_id=tenant)
    emit([c.contract_dict() for c in rows], fmt, title="candidates")


@app.command()
def clusters(
    tenant: Annotated[str | None, typer.Option("--tenant", help="only this tenant")] = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """List clusters and their member episodes, per tenant and namespace."""
    from memory_core.stages.cluster import list_clusters

    stores = command_context(home, config).stores
    emit(list_clusters(stores.meta, tenant_id=tenant), fmt, title="clusters")


@app.command()
def demo(
    seed: Annotated[int, typer.Option(help="random seed of the generated data")] = 7,
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Generate the seeded multi-tenant demo, ingest it and run consolidation once."""
    cmd = command_context(home, config, now)
    settings = cmd.prefect()
    from memory_core.demo.run import run_demo

    emit(run_demo(settings, seed=seed, now=cmd.clock_given), fmt)


def _register_commands() -> None:
    """Every module in memory_core.commands with a ``register(app)`` adds its command group."""
    import importlib
    import pkgutil

    import memory_core.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"memory_core.commands.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_commands()


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
        from typer import _click  # typer vendors click: its usage errors are not click's

        if isinstance(exc, click.exceptions.ClickException | _click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Exit | typer.Exit):
            sys.exit(exc.exit_code)
        raise


if __name__ == "__main__":
    main()
