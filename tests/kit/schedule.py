"""How the suite is spread over the xdist workers (``--dist loadgroup``, pyproject addopts).

As with ``--dist loadfile``, a test file is one unit of work, so a file's module fixtures
(a demo home, a Prefect server, a crash baseline) are built in one process. Two exceptions,
because with two workers the longest file bounds the wall time:

* a file may set ``XDIST_SPLIT = n``: its tests are dealt round-robin into n units (each
  worker that takes one builds that file's module fixtures for itself);
* the files listed in ``FIRST`` (the longest, measured) start first, so no long file is
  left to run alone at the end; the rest keep their collection order. An entry names a
  file or one unit of a split file (``path#n``);
* a test may name its own unit (``@pytest.mark.xdist_group(name)``), e.g. the tests that
  share one expensive per-process server (``LOCAL_PREFECT``); FIRST may name it too.

Nothing here changes what a test does or asserts; ``-n 0`` runs everything in one process.

xdist hands a worker's tests to the scheduler as node ids and ``--dist loadgroup`` reads the
unit from an ``@<group>`` suffix that its worker adds (``item._nodeid``). pytest 9.2 keeps a
node id in ``item._id`` (a structured ``NodeId``), so that write is lost, the suffix never
appears and every test was scheduled alone, as with ``--dist load`` (pytest-xdist issue
#1386): a file's module fixtures were built once per worker that took one of its tests and
``LOCAL_PREFECT``'s server started on every worker. ``name_units_in_node_ids`` adds the
suffix where xdist's own write did not take.
"""

from __future__ import annotations

import pytest

# A group for the tests that use kit/prefect.py's local_prefect (named by their marker).
LOCAL_PREFECT = "local-prefect"
# The longest units, longest first (a split file's units count apart): per-file sums of the
# 60 longest --durations from a whole-suite run (2026-12-02, 852 tests, two workers on a
# machine loaded by other jobs, /work/notes/dur-s23.log): the two crash_nightly halves
# ~240 s each, the privacy end-to-end test ~240 s in one test, the review_served tests ~120
# and ~150 s (split), then files of 50-120 s.
FIRST = (
    "tests/flows/test_crash_nightly.py#0",
    "tests/flows/test_privacy_end_to_end.py",
    "tests/flows/test_review_served.py",  # the browser test; the other is LOCAL_PREFECT's
    # the two tests that serve against one real `prefect server start` (kit/prefect.py
    # local_prefect, one per worker): on one worker, so the server is started once (and
    # stopped after the unit's last test: kit/prefect.py stop_local_prefect_after)
    LOCAL_PREFECT,
    # the second crash half after the privacy test on the other worker (xdist hands each
    # worker two units at the start): by then the first half has built the shared baseline
    # (tests/kit/once.py) and this half does not wait for it
    "tests/flows/test_crash_nightly.py#1",
    "tests/flows/test_dask_runner.py",
    # four tests that start process pools (~75 s, ~74 CPU s with their children, s32): left
    # out of FIRST they ran last on a worker, the run's tail
    "tests/stages/test_consolidate_pool.py",
    "tests/stages/mine/test_units.py",
    "tests/flows/test_serve_schedule.py",
    "tests/stages/mine/test_mine.py",
    "tests/test_fuzz_inputs.py",
    "tests/eval/test_eval_demo.py",
    "tests/flows/test_crash_forgetting.py",
    "tests/test_cli_forget.py",
    "tests/stages/forget/test_delete_subject.py",
    "tests/eval/test_eval_run.py",
    "tests/stages/test_stage_ledger.py",
    "tests/test_cli.py",
    "tests/flows/test_ephemeral_server.py",
    "tests/test_embed_backends.py",
    "tests/transcripts/test_adapters.py",
    "tests/flows/test_nightly.py",
    "tests/mcp_server/test_mcp_stdio.py",
    "tests/test_import_graph.py",
    "tests/flows/test_s3_nightly.py",
    "tests/flows/test_review_flow.py",
    "tests/test_html_report.py",
    "tests/mcp_server/test_mcp_cli.py",
    "tests/flows/test_mcp_save_during_flow.py",
    # files of 9-15 s that ran near the end in collection order (per-test walls of a whole
    # run on s40's machine, /work/notes/s40/cpuplug.py): the last minute is left to files of
    # a few seconds
    "tests/test_kit_forkserver.py",
    "tests/stages/ingest/test_ingest_fast.py",
    "tests/stages/ingest/test_redaction.py",
    "tests/test_lease.py",
)


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def group_of(item: pytest.Item | None) -> str | None:
    """The unit a test names itself (its ``xdist_group`` marker), if any."""
    own = None if item is None else item.get_closest_marker("xdist_group")
    if own is None:
        return None
    return str(own.args[0] if own.args else own.kwargs.get("name"))


def name_units_in_node_ids(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker under ``--dist loadgroup``, after xdist's own hook: each test's
    node id ends with ``@<its group>``, which the scheduler reads as its unit (module
    docstring). A node id that already has it (an older pytest, a fixed xdist) is kept."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId  # pytest >= 9.2: where a node id lives

    for item in items:
        group = group_of(item)
        if group is None or item.nodeid.endswith(f"@{group}"):
            continue
        item._id = NodeId.parse(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]


def assign_groups(items: list[pytest.Item]) -> None:
    """Mark every test with its unit of work and put the longest files first (stable)."""
    dealt: dict[str, int] = {}
    groups: dict[str, str] = {}
    for item in items:
        own = group_of(item)
        if own is not None:  # a test that names its own group keeps it
            groups[item.nodeid] = own
            continue
        path = _file(item)
        split = int(getattr(item.module, "XDIST_SPLIT", 1) or 1)
        n = dealt.get(path, 0)
        dealt[path] = n + 1
        group = path if split == 1 else f"{path}#{n % split}"
        groups[item.nodeid] = group
        item.add_marker(pytest.mark.xdist_group(group))
    rank = {name: i for i, name in enumerate(FIRST)}
    last = len(FIRST)

    def order(item: pytest.Item) -> int:
        path = _file(item)
        return rank.get(groups.get(item.nodeid, path), rank.get(path, last))

    items.sort(key=order)
