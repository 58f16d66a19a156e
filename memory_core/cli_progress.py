"""Progress bars for long CLI work (ingest, eval, expire): on a terminal only.

A person at a terminal wants to see that a 10-minute ingest is moving; a script piping
``--format json`` (or collecting ``--log-format json`` logs) wants nothing on its streams but
the document and the log lines. So a bar is drawn on stderr only when stderr is a TTY, the
output format is text and logs are not JSON; otherwise every helper here is a no-op.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["byte_bar", "enabled", "steps"]


def enabled(fmt: str, console: Console | None = None) -> bool:
    """Draw only for people: text output, text logs, a terminal on stderr."""
    if str(fmt) != "text" or os.environ.get("MEMCTL_LOG_FORMAT") == "json":
        return False
    return console.is_terminal if console is not None else sys.stderr.isatty()


@contextmanager
def byte_bar(
    fmt: str, description: str, total: int, *, console: Console | None = None
) -> Iterator[Callable[[int], None]]:
    """A bar over ``total`` bytes; the block gets ``update(bytes_done)``."""
    if not enabled(fmt, console):
        yield lambda done: None
        return
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console or Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)


@contextmanager
def steps(
    fmt: str, description: str, *, plain: bool = False, console: Console | None = None
) -> Iterator[Callable[[str], None]]:
    """A spinner with elapsed time for work without a known size; ``say(text)`` names the
    current step. Without a terminal, steps are printed as lines on stderr if ``plain``."""
    if not enabled(fmt, console):
        yield (
            (lambda text: print(text, file=sys.stderr, flush=True))
            if plain
            else (lambda text: None)
        )
        return
    columns = (SpinnerColumn(), TextColumn("[bold]{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=console or Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda text: bar.update(task, description=f"{description}: {text}")
