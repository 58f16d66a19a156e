"""tests/kit/schedule.py: xdist's scheduler sees each test's unit in its node id.

Under pytest 9.2 xdist's own ``@<group>`` suffix is lost (pytest-xdist issue #1386) and
``--dist loadgroup`` then schedules every test alone; these check that the kit puts it back
and that the scheduler reads the unit from it.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from _pytest.nodeid import NodeId
from xdist.scheduler.loadgroup import LoadGroupScheduling

from tests.kit.schedule import group_of, name_units_in_node_ids


class _Item:
    """What the kit reads and writes of a collected test: its node id and group marker."""

    def __init__(self, nodeid: str, group: str | None) -> None:
        self._id = NodeId.parse(nodeid)
        self.marker = None if group is None else pytest.mark.xdist_group(group).mark

    @property
    def nodeid(self) -> str:
        return str(self._id)

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.marker if name == "xdist_group" else None


def _config(loadgroup: bool) -> pytest.Config:
    return SimpleNamespace(option=SimpleNamespace(loadgroup=loadgroup))  # type: ignore[return-value]


def _unit(nodeid: str) -> str:
    """The unit xdist's loadgroup scheduler puts a node id in."""
    return LoadGroupScheduling._split_scope(None, nodeid)  # type: ignore[arg-type]


def test_a_grouped_test_is_scheduled_in_its_unit() -> None:
    items = [
        _Item("tests/flows/test_crash_nightly.py::test_killed[nightly.leased]", "crash#0"),
        _Item("tests/flows/test_crash_nightly.py::test_killed[mine.upserted]", "crash#0"),
        _Item("tests/test_lease.py::test_release", "tests/test_lease.py"),
    ]
    name_units_in_node_ids(_config(loadgroup=True), items)  # type: ignore[arg-type]
    assert (
        items[0].nodeid == "tests/flows/test_crash_nightly.py::test_killed[nightly.leased]@crash#0"
    )
    assert [_unit(i.nodeid) for i in items] == ["crash#0", "crash#0", "tests/test_lease.py"]


def test_a_suffix_already_there_or_no_group_is_left_alone() -> None:
    named = _Item("tests/test_lease.py::test_release@tests/test_lease.py", "tests/test_lease.py")
    alone = _Item("tests/test_lease.py::test_release", None)
    name_units_in_node_ids(_config(loadgroup=True), [named, alone])  # type: ignore[list-item]
    assert named.nodeid == "tests/test_lease.py::test_release@tests/test_lease.py"
    assert alone.nodeid == "tests/test_lease.py::test_release"


def test_nothing_changes_without_loadgroup() -> None:
    item = _Item("tests/test_lease.py::test_release", "tests/test_lease.py")
    name_units_in_node_ids(_config(loadgroup=False), [item])  # type: ignore[list-item]
    assert item.nodeid == "tests/test_lease.py::test_release"


def test_this_run_schedules_by_unit(request: pytest.FixtureRequest) -> None:
    """In this very run (an xdist worker under loadgroup, as the pyproject addopts run the
    suite) this test's node id carries its unit, so the scheduler keeps units together."""
    if not (os.environ.get("PYTEST_XDIST_WORKER") and request.config.option.loadgroup):
        pytest.skip("not an xdist worker under --dist loadgroup")
    unit = group_of(request.node)
    assert unit == "tests/test_kit_schedule.py"
    assert _unit(request.node.nodeid) == unit
