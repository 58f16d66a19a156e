"""DuckDB control plane: short connections, versioned migrations, lock errors that name the holder.

DuckDB locks the whole file per process while a read-write connection is open, so every
operation here opens, works and closes; a CLI call and a running flow then take turns instead
of failing. When the file really is held (a long transaction elsewhere), we wait up to
``lock_timeout_s`` and then raise ``MetaLocked`` with the holder's PID as DuckDB reports it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa

from memory_core.errors import MetaLocked, SchemaTooNew, StoreError
from memory_core.stores.migrations import MIGRATIONS

__all__ = ["SESSION_CHECKPOINT", "MetaStore", "latest_schema_version", "registered"]

logger = logging.getLogger(__name__)

_HOLDER = re.compile(r"Conflicting lock is held in (?P<exe>\S+) \(PID (?P<pid>\d+)\)")


# WAL size at which DuckDB checkpoints inside a session (its default is 16 MiB). At 1M
# episodes (1M cluster members, 1.2M evidence rows, 15k candidate bodies of ~12 KB) the
# nightly's partitions crossed the default every few partitions, and the commits that
# checkpointed grew with the tables (18.7 of 172 s wall in a 1M profile); with this, one
# process's 1M consolidation fell 107.7 -> 91.1 CPU s (BENCHMARKS.md). The session's close
# still checkpoints, and a commit is in the WAL when it returns: nothing is less durable.
SESSION_CHECKPOINT = "1GB"


def latest_schema_version() -> int:
    return MIGRATIONS[-1][0]


class MetaStore:
    """The pipeline's DuckDB file. Never read by agents."""

    def __init__(self, path: Path | str, *, lock_timeout_s: float = 10.0) -> None:
        self.path = Path(path)
        self.lock_timeout_s = lock_timeout_s
        self._session: duckdb.DuckDBPyConnection | None = None
        self._depth = 0
        self._guard = threading.Lock()
        self._local = threading.local()  # .unit: this thread's open atomic() transaction
        self._behind: threading.Thread | None = None  # checkpoint_behind's thread

    def _open(self) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = 0.05
        while True:
            try:
                return duckdb.connect(str(self.path))
            except duckdb.IOException as exc:
                text = str(exc)
                if "lock" not in text.lower():
                    msg = f"cannot open metadata file {self.path}: {text}"
                    raise StoreError(msg) from exc
                if time.monotonic() >= deadline:
                    match = _HOLDER.search(text)
                    holder = f"PID {match['pid']} ({match['exe']})" if match else None
                    raise MetaLocked(str(self.path), holder) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @contextmanager
    def session(self, checkpoint_threshold: str = SESSION_CHECKPOINT) -> Iterator[None]:
        """Keep the file open across several operations (one stage on one partition).

        Opening and closing a DuckDB file costs ~0.1 s here (catalog load, checkpoint on
        close), so a stage that makes a dozen small writes holds one session for its few
        hundred milliseconds instead; between stages the file is free for other processes.
        Threads of this process share the session through cursors.

        ``checkpoint_threshold``: the WAL size at which a commit checkpoints, set by the call
        that opens the session (a nested one shares it as it is). Until a checkpoint, what
        the session's commits wrote is also held in memory: a long session that writes a lot
        passes a lower one to bound that (``stages/consolidate_pool``).
        """
        with self._guard:
            if self._session is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._session = self._open()
                self._session.execute(f"SET checkpoint_threshold = '{checkpoint_threshold}'")
            self._depth += 1
        try:
            yield
        finally:
            with self._guard:
                self._depth -= 1
                closing = self._depth == 0 and self._session is not None
                behind = self._behind if closing else None
            if behind is not None:
                behind.join()  # its cursor must be done before the connection closes
            if closing:
                with self._guard:
                    self._behind = None
                    if self._depth == 0 and self._session is not None:
                        self._session.close()
                        self._session = None

    def checkpoint_behind(self) -> threading.Thread | None:
        """Start writing the open session's WAL into the file on a thread, while this process
        goes on; the thread (the session's close waits for it), or None without a session or
        while one is under way.

        Why: a night's session checkpoints once, at its close (~0.45 s at 1M, most of it the
        partitions' writes), after its last steps. Those that read no table the night wrote
        (Lance counts, Prefect artifacts) can run beside it: DuckDB lets reads of other tables
        through a checkpoint, while a read of a table it is writing, or any commit, waits for
        it (BENCHMARKS.md s48). A refusal (DuckDB's, while another transaction holds an
        update) is logged and leaves the WAL to the close."""
        with self._guard:
            if self._session is None or (self._behind is not None and self._behind.is_alive()):
                return None
            cursor = self._session.cursor()
            self._behind = threading.Thread(
                target=_checkpoint, args=(cursor, self.path), name="meta-checkpoint", daemon=True
            )
            self._behind.start()
            return self._behind

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction for everything this thread reads and writes inside it.

        ``connect`` and ``transaction`` on this thread join it (a nested ``transaction`` is
        part of it: no commit of its own), so a unit of work whose steps each commit alone
        (a partition's ~10: clusters, candidates, unit state, audit rows, watermark, ledger
        entry) commits once; a crash or an exception anywhere inside leaves none of it. Other
        threads keep their own transactions (cursors of the session); nested ``atomic`` calls
        join the outer one."""
        if getattr(self._local, "unit", None) is not None:
            yield
            return
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            self._local.unit = con
            try:
                yield
            except BaseException:
                self._local.unit = None
                con.abort()
                con.execute("ROLLBACK")
                raise
            self._local.unit = None
            con.abort()
            con.execute("COMMIT")

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection (a cursor when a session is open); close it quickly."""
        unit = getattr(self._local, "unit", None)
        if unit is not None:  # inside atomic(): its transaction sees its own writes
            yield from _joined(unit)
            return
        with self._guard:
            shared = self._session.cursor() if self._session is not None else None
        if shared is not None:
            try:
                yield shared
            finally:
                shared.close()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = self._open()
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """All-or-nothing: commits on success, rolls back on any exception (inside
        ``atomic`` on this thread: part of its transaction, which commits or rolls back)."""
        unit = getattr(self._local, "unit", None)
        if unit is not None:
            yield from _joined(unit)
            return
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def rewrite(self) -> float:
        """Copy the live data into a fresh file and put it in place; returns the seconds taken.

        DuckDB reuses freed blocks but never clears them: after a DELETE and a checkpoint the
        deleted rows' bytes stay in the file (CHECKPOINT, FORCE CHECKPOINT and VACUUM all left
        them on duckdb 2.0). Forgetting must not leave them, so the file is rewritten: ``COPY
        FROM DATABASE`` (schema, constraints, indexes, data) into ``<file>.rewrite``, then an
        atomic rename. The old file stays open read-write until the rename, so DuckDB's lock
        keeps every other process out meanwhile; one that waits opens the new file. Refused
        inside this process's ``session()``, whose connection would keep the old file.
        """
        if self._session is not None:
            msg = f"cannot rewrite {self.path} inside a session; call it between stages"
            raise StoreError(msg)
        started = time.perf_counter()
        fresh = self.path.with_name(self.path.name + ".rewrite")
        fresh.unlink(missing_ok=True)
        con = self._open()
        try:
            con.execute("CHECKPOINT")
            name = con.execute("SELECT current_database()").fetchone()
            con.execute(f"ATTACH '{_sql_path(fresh)}' AS _fresh")
            try:
                con.execute(f'COPY FROM DATABASE "{name[0] if name else "meta"}" TO _fresh')
            finally:
                con.execute("DETACH _fresh")
            fresh.replace(self.path)
        except BaseException:
            fresh.unlink(missing_ok=True)
            raise
        finally:
            con.close()
        return time.perf_counter() - started

    def schema_version(self) -> int:
        with self.connect() as con:
            return _current_version(con)

    def migrate(self, *, target: int | None = None) -> int:
        """Bring the file to ``target`` (default: latest); refuse files from a newer memctl."""
        target = latest_schema_version() if target is None else target
        with self.transaction() as con:
            current = _current_version(con)
            if current > latest_schema_version():
                raise SchemaTooNew(str(self.path), current, latest_schema_version())
            for version, statements in MIGRATIONS:
                if current < version <= target:
                    for statement in statements:
                        con.execute(statement)
                    con.execute(
                        "INSERT INTO schema_version VALUES (?, now())",
                        [version],
                    )
                    logger.info("migrated %s to schema version %d", self.path, version)
            return max(current, target)

    def check_version(self) -> None:
        """Fail fast on a newer file; migrate an older one."""
        current = self.schema_version()
        if current > latest_schema_version():
            raise SchemaTooNew(str(self.path), current, latest_schema_version())
        if current < latest_schema_version():
            self.migrate()


def _checkpoint(cursor: duckdb.DuckDBPyConnection, path: Path) -> None:
    try:
        cursor.execute("CHECKPOINT")
    except duckdb.Error as exc:  # the WAL stays; the session's close checkpoints it
        logger.warning("checkpoint of %s left to the session's close: %s", path, exc)
    finally:
        cursor.close()


def _joined(unit: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """The atomic() transaction's connection for one ``connect``/``transaction`` block, with
    any result the block left unfinished discarded after it (a ``fetchone`` of a query with
    more rows, or with one: DuckDB 2.0 holds it until a fetch returns nothing). Closing a
    cursor did that before; an unfinished result makes the next ``register`` on the
    connection raise ``ResourceInUseException``. ``abort`` keeps the transaction."""
    try:
        yield unit
    finally:
        unit.abort()


@contextmanager
def registered(con: duckdb.DuckDBPyConnection, **tables: pa.Table) -> Iterator[None]:
    """``tables`` registered on ``con`` by their keyword names for the block, unregistered
    after it whatever happens: the statements inside read many rows as one Arrow scan (a
    parameterised statement per row costs milliseconds each), and a registration left behind
    would hold its table and shadow the next one of that name."""
    for name, table in tables.items():
        con.register(name, table)
    try:
        yield
    finally:
        for name in tables:
            con.unregister(name)


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def _current_version(con: duckdb.DuckDBPyConnection) -> int:
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied_at TIMESTAMPTZ)"
    )
    row = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(row[0]) if row else 0
