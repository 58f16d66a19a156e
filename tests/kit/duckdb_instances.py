"""Keep each DuckDB file's database instance alive in the test process between operations.

``MetaStore`` opens and closes its DuckDB file around every operation (memory_core/stores/
meta.py: another process may want the file next). Each open builds a whole DuckDB instance
(~20-30 ms CPU: the catalog of built-in functions) and each close checkpoints it; a unit test
makes dozens to hundreds of them, and they were about half the CPU of the store-heavy tests.
DuckDB reuses a live instance for a new connection to the same file in the same process, so
while ``active``, the first ``MetaStore._open`` of a file also opens one connection that is
kept until the test ends (``release``): the code under test still opens, uses and closes its
own connections, and still sees real DuckDB with the same transactions and data; only the
instance survives between them (as within ``MetaStore.session``), so nothing is checkpointed
between operations.

What that would change, and so where it is off:

* the file stays locked by the test process: before a test starts a process that may open
  it, the kept instances are closed (``release``: ``kit.forkserver.run`` does it for a
  child that ends before the call returns; ``suspend`` turns keeping off for the rest of a
  test that starts a long-lived one, e.g. an MCP server). Modules that start processes by
  other means, or test locking between processes, set ``KEEP_DUCKDB_INSTANCES = False``;
* ``MetaStore.rewrite`` replaces the file by a rename: the kept instance of the old file is
  closed before and after it, so the next open reads the new file;
* ``MEMCTL_TEST_KEEP_DUCKDB=0`` turns it off for a whole run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import duckdb

from memory_core.stores.meta import MetaStore

_kept: dict[str, duckdb.DuckDBPyConnection] = {}
_lock = threading.Lock()
_state = {"active": False}
_original_open = MetaStore._open
_original_rewrite = MetaStore.rewrite


def _open(self: MetaStore) -> duckdb.DuckDBPyConnection:
    if _state["active"]:
        key = str(self.path)
        with _lock:
            if key not in _kept:
                _kept[key] = _original_open(self)
    return _original_open(self)


def _rewrite(self: MetaStore) -> Any:
    release(str(self.path))
    try:
        return _original_rewrite(self)
    finally:
        release(str(self.path))


def release(path: str | None = None) -> None:
    """Close the kept instance of ``path`` (all of them by default)."""
    with _lock:
        keys = list(_kept) if path is None else [path]
        cons = [_kept.pop(k) for k in keys if k in _kept]
    for con in cons:
        con.close()


def suspend() -> None:
    """Close every kept instance and keep none for the rest of this test."""
    _state["active"] = False
    release()


# read when conftest imports this, before clean_environ drops every MEMCTL_ variable from the
# tests' environment
_OFF_FOR_THE_RUN = os.environ.get("MEMCTL_TEST_KEEP_DUCKDB") == "0"


def enabled() -> bool:
    return not _OFF_FOR_THE_RUN and os.environ.get("MEMCTL_TEST_KEEP_DUCKDB", "1") != "0"


@contextmanager
def kept_for_this_test(keep: bool) -> Iterator[None]:
    """The autouse fixture's body (tests/conftest.py): keep instances while the test runs."""
    MetaStore._open = _open  # type: ignore[method-assign]
    MetaStore.rewrite = _rewrite  # type: ignore[method-assign]
    _state["active"] = keep and enabled()
    try:
        yield
    finally:
        _state["active"] = False
        release()


__all__ = ["enabled", "kept_for_this_test", "release", "suspend"]
