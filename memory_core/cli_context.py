"""The one preamble every memctl command shares: its home, settings, clock and stores.

Every command keeps its own ``--home``/``--config``/``--now`` options (they are part of the CLI
contract, and may follow the verb); it hands them to :func:`command_context` instead of
repeating settings/stores/clock lines. The object resolves each piece lazily and once, so a
command that only reads settings never opens the stores, and a bad ``--now`` is reported when
the command first asks for the clock - the same moment, and the same one-line usage error, as
before. It is also put on the click context (``ctx.obj``) for code running under the command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from memory_core.cli_support import _state, open_all, parse_now, prefect_env, settings_for
from memory_core.config import Settings
from memory_core.context import RunContext

__all__ = ["CommandContext", "command_context"]


@dataclass
class CommandContext:
    """The options a command was given, and what they resolve to (each at most once)."""

    home: Path | None = None
    config: Path | None = None
    now: str | None = None
    _prefect_ready: bool = field(default=False, init=False, repr=False)

    @cached_property
    def settings(self) -> Settings:
        """Config file + environment + this command's (or the root's) --home/--config."""
        return settings_for(self.home, self.config)

    @property
    def config_file(self) -> Path | None:
        """The config file this command reads: its own --config, else the root's, else none.
        Flows started in another process (``memctl serve``) must be handed the same file."""
        return self.config or _state.get("config")

    @cached_property
    def stores(self) -> Any:
        """The opened Lance and DuckDB stores of the home."""
        return open_all(self.settings)

    @cached_property
    def clock(self) -> datetime:
        """--now parsed (UTC), or the wall clock; a bad value is a one-line usage error."""
        return parse_now(self.now)

    @property
    def clock_given(self) -> datetime | None:
        """The --now clock when one was given, else None (callers that default it later)."""
        return self.clock if self.now else None

    def run(self, *, actor: str | None = None) -> RunContext:
        """The stage run context at this command's clock (and reviewer, when one acts)."""
        if actor is None:
            return RunContext(now=self.clock)
        return RunContext(now=self.clock, actor=actor)

    def prefect(self) -> Settings:
        """Point Prefect at the home before a flow runs (once); returns the settings."""
        if not self._prefect_ready:
            prefect_env(self.settings)
            self._prefect_ready = True
        return self.settings


def command_context(
    home: Path | None = None, config: Path | None = None, now: str | None = None
) -> CommandContext:
    """Build the command's preamble from its own options and keep it on ``ctx.obj``."""
    cmd = CommandContext(home=home, config=config, now=now)
    from typer._click.globals import get_current_context  # typer 0.29 vendors click

    click_ctx = get_current_context(silent=True)
    if click_ctx is not None:
        click_ctx.obj = cmd
    return cmd
