"""How the suite is spread over the xdist workers (``--dist loadgroup``, pyproject addopts).

As with ``--dist loadfile``, a test file is one unit of work, so a file's module fixtures
(a demo home, a Prefect server, a crash baseline) are built in one process. Two exceptions,
because with two workers the longest file bounds the wall time:

* a file may set ``XDIST_SPLIT = n``: its tests are dealt round-robin into n units (each
  worker that takes one builds that file's module fixtures for itself);
* the files listed in ``FIRST`` (the longest, measured) start first, so no long file is
  left to run alone at the end; the rest keep their collection order.

Nothing here changes what a test does or asserts; ``-n 0`` runs everything in one process.
"""

from __future__ import annotations

import pytest

# The longest files, longest first: per-file sums of --durations from a whole-suite run
# (2026-12-01, 754 tests, two workers on a loaded machine; test_crash_nightly ~17% of it).
FIRST = (
    "tests/flows/test_crash_nightly.py",
    "tests/flows/test_review_served.py",
    "tests/test_cli_forget.py",
    "tests/flows/test_crash_forgetting.py",
    "tests/flows/test_dask_runner.py",
    "tests/flows/test_ephemeral_server.py",
    "tests/flows/test_privacy_end_to_end.py",
    "tests/flows/test_nightly.py",
    "tests/mcp_server/test_mcp_stdio.py",
    "tests/stages/forget/test_delete_subject.py",
    "tests/mcp_server/test_mcp_cli.py",
    "tests/flows/test_review_flow.py",
    "tests/flows/test_serve_schedule.py",
)


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def assign_groups(items: list[pytest.Item]) -> None:
    """Mark every test with its unit of work and put the longest files first (stable)."""
    dealt: dict[str, int] = {}
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue  # a test that names its own group keeps it
        path = _file(item)
        split = int(getattr(item.module, "XDIST_SPLIT", 1) or 1)
        n = dealt.get(path, 0)
        dealt[path] = n + 1
        group = path if split == 1 else f"{path}#{n % split}"
        item.add_marker(pytest.mark.xdist_group(group))
    rank = {path: i for i, path in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(_file(item), len(FIRST)))
