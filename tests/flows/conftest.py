"""A real Prefect run for flow tests: one ephemeral server for the whole session (under xdist,
one for every worker of the run: tests/kit/prefect.py ``session_harness``)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


@pytest.fixture(scope="session", autouse=True)
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect"))
    from tests.kit.prefect import session_harness

    with session_harness(tmp_path_factory):
        yield
