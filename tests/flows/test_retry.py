"""Flows retry only TransientError: a real Prefect run of a task that fails each way.

Every task in flows/ is declared through ``flows.retry.pipeline_task``; a TerminalError (or any
other exception) fails the task on the first try, a TransientError is tried again.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from prefect import flow
from prefect.tasks import Task

from flows.retry import pipeline_task, transient_only
from memory_core.errors import ConfigError, MetaLocked, TerminalError, TransientError

ERRORS = {
    "transient": lambda: MetaLocked("/tmp/meta.duckdb", "another memctl"),
    "terminal": lambda: ConfigError("cluster.threshold", "must be in (0, 1]"),
    "other": lambda: ValueError("a bug"),
}

tries: list[str] = []


@pipeline_task("fails-then-passes", retries=2, retry_delay_s=0)
def fails_then_passes(kind: str, failures: int) -> int:
    tries.append(kind)
    if len(tries) <= failures:
        raise ERRORS[kind]()
    return len(tries)


@flow(name="retry-probe")
def probe(kind: str, failures: int) -> int:
    return fails_then_passes(kind, failures)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    tries.clear()


def test_a_transient_error_is_retried() -> None:
    assert probe("transient", 2) == 3
    assert tries == ["transient"] * 3


def test_a_transient_error_fails_once_its_retries_are_spent() -> None:
    with pytest.raises(TransientError):
        probe("transient", 5)
    assert len(tries) == 3


@pytest.mark.parametrize(("kind", "error"), [("terminal", TerminalError), ("other", ValueError)])
def test_anything_else_is_not_retried(kind: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        probe(kind, 1)
    assert tries == [kind]


@pytest.mark.parametrize("module", ["flows.nightly", "flows.forgetting", "flows.review"])
def test_every_task_retries_only_transient_errors(module: str) -> None:
    tasks = [v for v in vars(importlib.import_module(module)).values() if isinstance(v, Task)]
    assert tasks
    for t in tasks:
        assert t.retry_condition_fn is transient_only, t.name
        assert t.retries >= 1, t.name


def test_no_task_is_declared_around_pipeline_task() -> None:
    """A bare ``@task`` would retry whatever the error (or never): flows declare tasks only
    through ``pipeline_task``."""
    root = Path(importlib.import_module("flows").__file__ or "").parent
    bare = [
        f"{path.name}:{n}"
        for path in sorted(root.glob("*.py"))
        if path.name != "retry.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"^\s*@(prefect\.)?task\b|\bimport\b.*\btask\b", line)
    ]
    assert bare == []
