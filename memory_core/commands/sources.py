"""memctl sources update FILE.jsonl | list: the corpus revisions staleness is judged against."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memory_core.cli_context import command_context
from memory_core.cli_support import (
    ConfigOpt,
    FormatOpt,
    HomeOpt,
    NowOpt,
    OutputFormat,
    emit,
)

__all__ = ["register"]

sources_app = typer.Typer(
    help="Corpus sources and their current revisions (what memories are bound to).",
    no_args_is_help=True,
)


@sources_app.command("update")
def update_cmd(
    file: Annotated[Path, typer.Argument(help="JSONL: {source_id, revision, changed_at, deleted}")],
    now: NowOpt = None,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Record current revisions; the next nightly run marks what is bound to older ones stale."""
    from memory_core.stages.staleness.source_file import update_sources

    if not file.is_file():
        msg = f"{file}: no such file"
        raise typer.BadParameter(msg)
    cmd = command_context(home, config, now)
    stores, ctx = cmd.stores, cmd.run()
    with file.open(encoding="utf-8") as handle:
        emit(update_sources(stores, ctx, handle, path=str(file)), fmt)


@sources_app.command("list")
def list_cmd(
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """List known sources: current revision, when it changed, deleted, when it was handled."""
    from memory_core.stores.sources import list_sources

    stores = command_context(home, config).stores
    emit([s.as_dict() for s in list_sources(stores.meta)], fmt, title="sources")


def register(app: typer.Typer) -> None:
    """Add `memctl sources ...` to the memctl app."""
    app.add_typer(sources_app, name="sources")
