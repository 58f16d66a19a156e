"""Keep each DuckDB file attached to one DuckDB instance per test process between operations.

``MetaStore`` opens and closes its DuckDB file around every operation (memory_core/stores/
meta.py: another process may want the file next). Each open builds a whole DuckDB instance
(~20-40 ms CPU: the catalog of built-in functions) and each close checkpoints it; a unit test
makes dozens to hundreds of them. So while ``active``, ``MetaStore._open`` returns a cursor of
the test process's one instance, on which the file is ``ATTACH``ed once (1.6 ms against
~38 ms for a new instance, BENCHMARKS.md s33) and selected with ``USE``: the code under test
still opens, uses and closes its own connections, and still sees real DuckDB with the same
transactions and data on the real file; only the instance survives between them (as within
``MetaStore.session``), so nothing is checkpointed between operations. The stores' catalog
queries name their database (``current_database()``), so other attached files are not seen.

What that would change, and so where it is off:

* the file stays locked by the test process: before a test starts a process that may open
  it, the kept files are detached (``release``: ``kit.forkserver.run`` does it for a
  child that ends before the call returns; ``suspend`` turns keeping off for the rest of a
  test that starts a long-lived one, e.g. an MCP server). Modules that start processes by
  other means, or test locking between processes, set ``KEEP_DUCKDB_INSTANCES = False``;
* ``MetaStore.rewrite`` replaces the file by a rename: the old file is
  detached before and after it, so the next open attaches the new file;
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

_kept: dict[str, str] = {}  # file -> its alias on the worker's instance
_lock = threading.RLock()
_state = {"active": False}
_instance: list[duckdb.DuckDBPyConnection] = []  # the worker's one instance, made on first use
_count = [0]
_original_open = MetaStore._open
_original_rewrite = MetaStore.rewrite


class _OnDatabase:
    """A cursor of the worker's instance working on one attached file, as a connection to
    that file would: its own cursors (``MetaStore.session`` hands those to threads) are put on
    the same file, since a new cursor starts on the instance's in-memory default."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, alias: str) -> None:
        self._cursor = cursor
        self._alias = alias

    def cursor(self) -> _OnDatabase:
        with _lock:
            cur = self._cursor.cursor()
        cur.execute(f"USE {self._alias}")
        return _OnDatabase(cur, self._alias)

    def __enter__(self) -> _OnDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


def _open(self: MetaStore) -> Any:
    if not _state["active"]:
        return _original_open(self)
    key = str(self.path)
    with _lock:
        if not _instance:
            _instance.append(duckdb.connect())
        alias = _kept.get(key)
        if alias is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _count[0] += 1
            alias = f"kit_{_count[0]}"
            quoted = key.replace("'", "''")
            _instance[0].execute(f"ATTACH '{quoted}' AS {alias}")
            _kept[key] = alias
        cur = _instance[0].cursor()
    cur.execute(f"USE {alias}")
    return _OnDatabase(cur, alias)


def _rewrite(self: MetaStore) -> Any:
    release(str(self.path))
    try:
        return _original_rewrite(self)
    finally:
        release(str(self.path))


def release(path: str | None = None) -> None:
    """Detach ``path`` (every kept file by default): DuckDB checkpoints it and lets it go."""
    with _lock:
        keys = list(_kept) if path is None else [path]
        aliases = [_kept.pop(k) for k in keys if k in _kept]
        for alias in aliases:
            _instance[0].execute(f"DETACH {alias}")


def suspend() -> None:
    """Detach every kept file and keep none for the rest of this test."""
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
