"""JSON logs on request, progress bars only for people at a terminal."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import pytest
from rich.console import Console

from memory_core.cli_progress import byte_bar, enabled, steps
from memory_core.logging_setup import JsonFormatter, log_format, prefect_logging
from tests.conftest import episode, lines_of
from tests.kit import forkserver

MEMCTL = str(Path(sys.executable).with_name("memctl"))


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100), out


def test_json_formatter_writes_one_object_with_run_fields_and_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("memory_core.x").makeRecord(
            "memory_core.x", logging.ERROR, __file__, 1, "stage %s failed", ("mine",),
            sys.exc_info(), extra={"flow_run_name": "brave-fox", "partition": "acme/it"},
        )  # fmt: skip
    line = JsonFormatter().format(record)
    assert "\n" not in line.split('"exc"')[0]  # the record is one line until the traceback
    doc = json.loads(line)
    assert doc["message"] == "stage mine failed" and doc["level"] == "ERROR"
    assert doc["flow_run_name"] == "brave-fox" and doc["partition"] == "acme/it"
    assert "ValueError: boom" in doc["exc"] and doc["ts"].endswith("+00:00")


def test_log_format_option_env_and_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    assert log_format(None) == "text"
    monkeypatch.setenv("MEMCTL_LOG_FORMAT", "json")
    assert log_format(None) == "json" and log_format("text") == "text"
    with pytest.raises(ValueError, match="text or json"):
        log_format("xml")


def test_prefect_logging_config_uses_our_formatter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_LOGGING_SETTINGS_PATH", "restored-after-the-test")
    path = prefect_logging(tmp_path)
    config = json.loads(path.read_text())
    assert config["formatters"]["json"]["()"] == "memory_core.logging_setup.JsonFormatter"
    assert config["root"]["handlers"] == ["console"]
    import os

    assert os.environ["PREFECT_LOGGING_SETTINGS_PATH"] == str(path)


def test_bars_draw_on_a_terminal_only_in_text_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    console, out = _terminal()
    with byte_bar("text", "ingest big.jsonl", 1000, console=console) as update:
        update(500)
    assert "ingest big.jsonl" in out.getvalue()
    console, out = _terminal()
    with steps("text", "eval", console=console) as say:
        say("locomo: running")
    assert "eval" in out.getvalue()
    console, out = _terminal()
    with byte_bar("json", "ingest", 10, console=console) as update:
        update(5)
    assert out.getvalue() == ""
    monkeypatch.setenv("MEMCTL_LOG_FORMAT", "json")
    assert not enabled("text", _terminal()[0])
    monkeypatch.delenv("MEMCTL_LOG_FORMAT")
    assert not enabled("text", Console(file=io.StringIO()))  # not a terminal


def test_cli_log_format_json_makes_every_stderr_line_json(tmp_path: Path) -> None:
    data = tmp_path / "episodes.jsonl"
    data.write_text("\n".join(lines_of(episode(), episode(episode_id="e2"))) + "\n")
    proc = forkserver.run(
        [MEMCTL, "--log-format", "json", "ingest", str(data), "--home", str(tmp_path / "h"),
         "--format", "json"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**__import__("os").environ, "MEMCTL_EMBED__MODEL": "hash"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["inserted"] == 2  # stdout: the one document, no bar
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines, "expected log lines (schema migrations) on stderr"
    for line in lines:
        doc = json.loads(line)
        assert {"ts", "level", "logger", "message"} <= set(doc)


def test_cli_rejects_an_unknown_log_format(tmp_path: Path) -> None:
    proc = forkserver.run(
        [MEMCTL, "--log-format", "xml", "status", "--home", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "text or json" in proc.stderr
