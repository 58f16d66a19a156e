"""A Lance commit that loses a race with another writer is done again from the latest version.

Found from outside: the nightly flow's index-episodes task failed with ``Retryable commit
conflict ... CreateIndex preempted by concurrent CreateIndex`` while an MCP server folded its
saves into the same indices (``mcp.index_every``). The conflicts here are real Lance ones:
a handle opened before another writer's commit loses, as the flow's did.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from memory_core.errors import CommitConflict, TransientError
from memory_core.read.indexes import refresh_indices
from memory_core.stores.commit_retry import is_commit_conflict, retry_on_commit_conflict
from memory_core.stores.lance import LanceStore
from memory_core.stores.maintenance import fold_new_rows


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"episode_id": [f"e{i:05d}" for i in range(start, start + n)]})


def _indexed(path: Path) -> str:
    ds = lance.write_dataset(_rows(0, 50), path)
    ds.create_scalar_index("episode_id", "BTREE", name="episode_id_idx")
    return str(path)


def _unindexed(uri: str) -> int:
    stats = lance.dataset(uri).stats.index_stats("episode_id_idx")
    return int(stats.get("num_unindexed_rows", 0))


def test_a_lost_index_commit_is_done_again_from_the_latest_version(tmp_path):
    uri = _indexed(tmp_path / "t.lance")
    lance.write_dataset(_rows(50, 5), uri, mode="append")
    stale = lance.dataset(uri)
    lance.dataset(uri).optimize.optimize_indices(index_names=["episode_id_idx"])  # the other
    lance.write_dataset(_rows(55, 5), uri, mode="append")
    handles = [stale]
    slept: list[float] = []

    def fold() -> int:
        ds = handles.pop() if handles else lance.dataset(uri)
        ds.optimize.optimize_indices(index_names=["episode_id_idx"])
        return ds.version

    version = retry_on_commit_conflict(fold, table="t", what="fold", sleep=slept.append)
    assert len(slept) == 1  # the stale handle lost once, the fresh one committed
    assert version == lance.dataset(uri).version
    assert _unindexed(uri) == 0  # the rows appended after the other writer are folded too


def test_a_race_lost_every_time_is_a_transient_error_naming_table_and_action(tmp_path):
    uri = _indexed(tmp_path / "t.lance")
    slept: list[float] = []

    def always_stale() -> None:
        lance.write_dataset(_rows(1000 + len(slept), 1), uri, mode="append")
        stale = lance.dataset(uri)
        lance.dataset(uri).optimize.optimize_indices(index_names=["episode_id_idx"])
        stale.optimize.optimize_indices(index_names=["episode_id_idx"])

    with pytest.raises(CommitConflict) as caught:
        retry_on_commit_conflict(
            always_stale, table="episodes", what="folding", attempts=3, sleep=slept.append
        )
    assert isinstance(caught.value, TransientError)  # so the flow's task retry takes it up
    assert "'episodes'" in str(caught.value) and "folding" in str(caught.value)
    assert caught.value.attempts == 3 and len(slept) == 2
    assert is_commit_conflict(caught.value.__cause__)


def test_other_errors_are_not_retried(tmp_path):
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        lance.dataset(str(tmp_path / "missing.lance"))

    with pytest.raises((OSError, ValueError)) as caught:
        retry_on_commit_conflict(broken, table="t", what="x", sleep=lambda _: None)
    assert not is_commit_conflict(caught.value)
    assert calls == [1]


def test_folding_beside_an_mcp_server_refreshing_the_same_indices(tmp_path):
    """The night's fold and the server's refresh race for the same index commits.

    The test's own appends (the new rows each fold has to index) wait for the server's turn to
    end: they are setup, not the race under test, and against a writer committing every few
    milliseconds an append could lose Lance's own retry loop for 30 s on a loaded machine
    ("Too many concurrent writers", seen twice in full runs). The fold still races the
    server's appends and refreshes with nothing held."""
    store = LanceStore(str(tmp_path / "lance"))
    store.db.create_table("episodes", _rows(0, 50))
    store.table("episodes").to_lance().create_scalar_index(
        "episode_id", "BTREE", name="episode_id_idx"
    )
    errors: list[BaseException] = []
    done = threading.Event()
    turn = threading.Lock()  # held by the server for one save + refresh, by the test's append

    def server() -> None:
        other = LanceStore(store.uri).table("episodes")
        n = 10_000
        while not done.is_set():
            try:
                with turn:
                    other.add(_rows(n, 1))
                    refresh_indices(other)  # as the MCP server's refresher does
            except Exception as exc:  # the server logs it and goes on
                if not is_commit_conflict(exc):
                    errors.append(exc)
            n += 1
            time.sleep(0.002)

    thread = threading.Thread(target=server)
    thread.start()
    try:
        for i in range(25):
            with turn:
                store.table("episodes").add(_rows(100 + i * 3, 3))
            # a lost race is retried, and one lost every time is left to the next night
            fold_new_rows(store, "episodes", ["episode_id"])
    finally:
        done.set()
        thread.join()
    assert not errors
    fold_new_rows(store, "episodes", ["episode_id"])
    assert _unindexed(f"{store.uri}/episodes.lance") == 0
