# ruff: noqa: FBT002  (typer options are booleans by design, as in cli.py)
"""memctl report [--open]: write the static HTML report of the home's run history.

The nightly flow writes the same page after every run; this command refreshes it on demand
(e.g. after a forgetting pass or a review) and prints where it is.
"""

from __future__ import annotations

import webbrowser
from typing import Annotated

import typer

from memory_core.cli_context import command_context
from memory_core.cli_support import (
    ConfigOpt,
    FormatOpt,
    HomeOpt,
    OutputFormat,
    emit,
)


def report(
    open_: Annotated[
        bool, typer.Option("--open", help="open the report in the default browser")
    ] = False,
    home: HomeOpt = None,
    config: ConfigOpt = None,
    fmt: FormatOpt = OutputFormat.text,
) -> None:
    """Write <home>/reports/index.html: rows, candidates, forgetting, LLM use, durations."""
    from memory_core.report import collect_report, write_report

    cmd = command_context(home, config)
    settings, stores = cmd.settings, cmd.stores
    data = collect_report(stores)
    path = write_report(stores, settings.home, data=data)
    emit(
        {
            "report": str(path.resolve()),
            "nightly_runs": len(data.runs),
            "forgetting_passes": len(data.forgetting),
            "llm_runs": len(data.llm),
        },
        fmt,
    )
    if open_:
        webbrowser.open(path.resolve().as_uri())


def register(app: typer.Typer) -> None:
    """Add this module's commands to the memctl app."""
    app.command(name="report")(report)
