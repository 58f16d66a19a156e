"""The CLI preamble (memory_core/cli_context.py): one object per command, resolved lazily."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import typer
from typer.testing import CliRunner

from memory_core.cli_context import CommandContext, command_context


def test_pieces_resolve_only_when_asked_and_once(tmp_path):
    cmd = command_context(tmp_path, None, "2026-07-01T02:00:00+02:00")
    assert "settings" not in cmd.__dict__ and "stores" not in cmd.__dict__
    assert cmd.clock == datetime(2026, 7, 1, tzinfo=UTC)
    assert "settings" not in cmd.__dict__  # the clock alone loads no config
    assert cmd.settings.home == tmp_path
    assert cmd.settings is cmd.settings
    run = cmd.run(actor="alice")
    assert (run.now, run.actor) == (cmd.clock, "alice")
    assert cmd.run().actor == "memctl"


def test_bad_now_is_a_usage_error_when_the_clock_is_first_read(tmp_path):
    cmd = command_context(tmp_path, None, "yesterday")  # building it never fails
    with pytest.raises(typer.BadParameter, match="--now 'yesterday' is not RFC3339"):
        _ = cmd.clock


def test_clock_given_is_none_without_now_and_the_wall_clock_otherwise(tmp_path):
    cmd = command_context(tmp_path)
    assert cmd.clock_given is None
    assert cmd.clock.tzinfo is UTC


def test_the_command_finds_it_on_ctx_obj(tmp_path):
    app = typer.Typer()
    seen: list[object] = []

    @app.command()
    def probe(ctx: typer.Context, now: str = typer.Option(...)) -> None:
        cmd = command_context(tmp_path, None, now)
        seen.append(ctx.obj is cmd)
        typer.echo(cmd.clock.isoformat())

    result = CliRunner().invoke(app, ["--now", "2026-07-01T00:00:00Z"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "2026-07-01T00:00:00+00:00"
    assert seen == [True]


def test_home_and_config_are_the_commands_own_options():
    cmd = CommandContext()
    assert (cmd.home, cmd.config, cmd.now) == (None, None, None)


def test_config_file_is_the_commands_own_else_the_roots(tmp_path, monkeypatch):
    from memory_core import cli_support

    root_cfg, own_cfg = tmp_path / "root.toml", tmp_path / "own.toml"
    monkeypatch.setitem(cli_support._state, "config", root_cfg)
    assert command_context(tmp_path).config_file == root_cfg
    assert command_context(tmp_path, own_cfg).config_file == own_cfg
    monkeypatch.delitem(cli_support._state, "config")
    assert command_context(tmp_path).config_file is None
