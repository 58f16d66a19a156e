"""tests/kit/prefect.py: the local server is stopped when the unit of tests sharing it is done.

The server process here is a stand-in (``sleep`` in its own process group, as the real
``prefect server start`` is started): what is tested is when the kit stops it, not Prefect.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kit import prefect as kit
from tests.kit.schedule import LOCAL_PREFECT


class _Item:
    """What the hook reads of a collected test: its xdist group marker."""

    def __init__(self, group: str | None) -> None:
        self.marker = None if group is None else pytest.mark.xdist_group(group).mark

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marker if name == "xdist_group" else None


@pytest.fixture
def running(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    saved = kit._server, kit._proc
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    kit._proc = proc
    kit._server = kit.LocalPrefect(api_url="http://127.0.0.1:9/api", home=tmp_path)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    kit._server, kit._proc = saved


def _stop(item: str | None, nextitem: str | None, *, last: bool = False) -> None:
    kit.stop_local_prefect_after(_Item(item), None if last else _Item(nextitem))  # type: ignore[arg-type]


def test_kept_between_tests_of_its_unit_and_stopped_after_the_last(
    running: subprocess.Popen[bytes],
) -> None:
    _stop(LOCAL_PREFECT, LOCAL_PREFECT)
    assert running.poll() is None and kit._server is not None
    _stop("tests/flows/test_nightly.py", LOCAL_PREFECT)  # another unit's test: not its user
    assert running.poll() is None
    _stop(LOCAL_PREFECT, "tests/flows/test_nightly.py")
    assert running.wait(timeout=20) is not None
    assert kit._server is None and kit._proc is None


def test_stopped_when_its_unit_is_the_last_on_the_worker(
    running: subprocess.Popen[bytes],
) -> None:
    _stop(LOCAL_PREFECT, None, last=True)
    assert running.wait(timeout=20) is not None and kit._proc is None
