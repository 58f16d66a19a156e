"""Logs as JSON lines on request: ``memctl --log-format json`` or ``MEMCTL_LOG_FORMAT=json``.

Operators ship memctl's stderr to a log store; one JSON object per line (ts, level, logger,
message, and the flow/task run when Prefect knows it) needs no parsing rules there. Two
places log: memctl itself (configured here on the root logger) and Prefect, which configures
its own logging at import, also in the subprocesses ``memctl serve`` starts per flow run. So
for Prefect the same formatter is handed over through ``PREFECT_LOGGING_SETTINGS_PATH``: a
logging config written next to the home's Prefect database, which every child inherits
through the environment. Text (the default) leaves logging exactly as it was.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "LOG_FORMAT_ENV",
    "JsonFormatter",
    "configure_logging",
    "log_format",
    "prefect_logging",
    "quiet_expected_errors",
]

LOG_FORMAT_ENV = "MEMCTL_LOG_FORMAT"
LogFormat = Literal["text", "json"]

# LogRecord attributes that are plumbing, not content
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_RUN_FIELDS = ("flow_run_id", "flow_run_name", "flow_name", "task_run_id", "task_run_name")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts (UTC, RFC3339), level, logger, message, run ids, extras."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key in _RUN_FIELDS or (key not in _STANDARD and not key.startswith("_")):
                out[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            out["exc"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return json.dumps(out, ensure_ascii=False)


class _ExpectedErrors(logging.Filter):
    """Drops Prefect's report of a run that failed with one of our expected errors: the
    command prints that error as its one line (cli.main), and Prefect's copy is a 20-line
    traceback in front of it (a second ``memctl consolidate`` and the lease message)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from memory_core.errors import MemoryCoreError

        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, MemoryCoreError)


_QUIET = _ExpectedErrors()
_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def quiet_expected_errors() -> None:
    """For a command run on a terminal: no Prefect traceback for the errors it reports itself
    (unexpected errors keep theirs; ``MEMCTL_LOG_LEVEL=DEBUG`` keeps every one). Uses only
    the standard library: a filter on Prefect's run loggers, which its logging config keeps."""
    if os.environ.get("MEMCTL_LOG_LEVEL", "").upper() == "DEBUG":
        return
    for name in _RUN_LOGGERS:
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)


def log_format(option: str | None = None) -> LogFormat:
    """The format asked for: the option, else ``MEMCTL_LOG_FORMAT``, else text."""
    value = (option or os.environ.get(LOG_FORMAT_ENV) or "text").lower()
    if value not in ("text", "json"):
        msg = f"log format must be text or json, not {value!r}"
        raise ValueError(msg)
    return value  # type: ignore[return-value]


def configure_logging(fmt: LogFormat, *, level: str | None = None) -> None:
    """JSON: every record that reaches the root logger goes to stderr as one JSON line.
    The choice is exported (``MEMCTL_LOG_FORMAT``) so child processes log the same way."""
    if fmt != "json":
        if os.environ.get(LOG_FORMAT_ENV, "text") != "text":
            os.environ[LOG_FORMAT_ENV] = "text"  # --log-format text beats the environment
        return
    os.environ[LOG_FORMAT_ENV] = fmt
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # libraries: warnings only, as in text mode
    for ours in ("memory_core", "flows"):
        logging.getLogger(ours).setLevel(level or os.environ.get("MEMCTL_LOG_LEVEL", "INFO"))


def prefect_logging(prefect_home: Path) -> Path:
    """Write Prefect's logging config with our JSON formatter; point Prefect at it."""
    level = os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING")
    console = {
        "class": "logging.StreamHandler",
        "formatter": "json",
        "stream": "ext://sys.stderr",
    }
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "memory_core.logging_setup.JsonFormatter"}},
        "handlers": {
            "console": console,
            "api": {"class": "prefect.logging.handlers.APILogHandler"},
            "worker_api": {"class": "prefect.logging.handlers.WorkerAPILogHandler"},
        },
        "loggers": {
            "prefect": {"level": level},
            "prefect.extra": {"level": level, "handlers": ["api"], "propagate": False},
            "prefect.flow_runs": {"level": "NOTSET", "handlers": ["api"]},
            "prefect.task_runs": {"level": "NOTSET", "handlers": ["api"]},
            "prefect.workers": {"level": "NOTSET", "handlers": ["worker_api"]},
            "prefect._internal": {"level": "ERROR", "handlers": ["console"], "propagate": False},
            "uvicorn": {"level": level, "handlers": ["console"], "propagate": False},
            "memory_core": {"level": os.environ.get("MEMCTL_LOG_LEVEL", "INFO")},
            "flows": {"level": os.environ.get("MEMCTL_LOG_LEVEL", "INFO")},
            "httpx": {"level": "WARNING"},
        },
        "root": {"level": "WARNING", "handlers": ["console"]},
    }
    path = prefect_home / "logging-json.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
    os.environ["PREFECT_LOGGING_SETTINGS_PATH"] = str(path)
    return path
