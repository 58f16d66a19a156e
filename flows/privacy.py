"""Prefect's copies of a forgotten subject: found, removed, listed in the receipt.

Our flows send Prefect ids and counts only (artifacts, run names, parameters, logs, results;
docs/privacy.md). What can still reach it: a reviewer's typed input in a review form (a reason,
a corrected object), and anything an older version published. ``PrefectStore`` is the
``Orchestrator`` the forget path takes (``memory_core/stores/residue.py``):

* through Prefect's API, when one is reachable without starting a server (``PREFECT_API_URL``
  set, or inside a flow run): artifacts whose data or description hold a needle are deleted,
  and so are run inputs (forms and answers) of the form-bearing flows;
* result files under the local result storage that hold a needle are deleted;
* a Prefect SQLite database under the home (the ephemeral server's, or the one ``memctl serve``
  starts) is cleaned first, in SQL: rows of ``artifact``, ``artifact_collection``,
  ``flow_run_input``, ``events``, ``event_resources`` and ``log`` holding a needle (Prefect
  has no API for events or logs, and deleting an artifact through it emits an event with the
  data of the version that becomes the latest); then ``VACUUM`` rewrites the file and the WAL
  is truncated (free pages and old WAL frames keep deleted rows). A remote server or Prefect
  Cloud keeps its events for its retention period: which is why nothing we send holds text.

Every removed object is listed as ``{"kind", "id"}``; ``residue`` re-reads the same places.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

from memory_core.stores.residue import Needles

__all__ = ["FORM_FLOWS", "PrefectStore", "prefect_store"]

logger = logging.getLogger(__name__)

FORM_FLOWS = ("promotion-review",)  # the flows that wait for a person's input
_PAGE = 200
_SQL_TABLES = {  # table: (id column, text columns) searched in a home-local database
    "events": ("id", ("payload", "resource", "related")),
    "event_resources": ("id", ("resource",)),
    "log": ("id", ("message",)),
    "artifact": ("id", ("data", "description", "metadata_")),
    "artifact_collection": ("id", ("data", "description", "metadata_")),
    "flow_run_input": ("id", ("value",)),
}


def _api_reachable() -> bool:
    """An API URL is configured, or this process runs a flow (so it talks to a server)."""
    if os.environ.get("PREFECT_API_URL"):
        return True
    if "prefect.context" not in sys.modules:  # not importing Prefect (seconds) to learn no
        return False
    from prefect.context import FlowRunContext, TaskRunContext

    return bool(FlowRunContext.get() or TaskRunContext.get())


class PrefectStore:
    """The forget path's view of Prefect for one home."""

    def __init__(self, home: Path, *, use_api: bool | None = None) -> None:
        self.home = home.resolve()
        self.use_api = _api_reachable() if use_api is None else use_api

    # -- the Orchestrator protocol ---------------------------------------------------------

    def purge(self, needles: Needles) -> list[dict[str, str]]:
        # The home's own database first, in SQL: deleting an artifact through the API emits
        # an artifact-collection event carrying the data of the version that becomes the
        # latest, persisted seconds later, after any scrub. Whatever is left (a remote server,
        # Prefect Cloud) goes through the API.
        removed: list[dict[str, str]] = self._purge_sqlite(needles, tables=None)
        if self.use_api:
            removed += self._purge_api(needles)
        removed += self._purge_results(needles)
        if removed:
            logger.info("prefect: removed %d object(s) holding a forgotten subject", len(removed))
        return removed

    def residue(self, needles: Needles) -> dict[str, int]:
        left: dict[str, int] = {}
        if self.use_api:
            for kind, _ in self._api_hits(needles):
                left[f"prefect.{kind}"] = left.get(f"prefect.{kind}", 0) + 1
        for path in self._result_files():
            if needles.found_in(path.read_bytes()):
                left["prefect.result"] = left.get("prefect.result", 0) + 1
        for table, _ in self._sqlite_hits(needles, tables=None):
            left[f"prefect_db.{table}"] = left.get(f"prefect_db.{table}", 0) + 1
        return left

    # -- API ---------------------------------------------------------------------------------

    def _api_hits(self, needles: Needles) -> Iterator[tuple[str, Any]]:
        """("artifact", id) and ("run_input", (flow_run_id, key)) of objects holding a needle."""
        from prefect.client.orchestration import get_client
        from prefect.client.schemas.filters import FlowFilter, FlowFilterName

        with get_client(sync_client=True) as client:
            offset = 0
            while True:
                page = client.read_artifacts(limit=_PAGE, offset=offset)
                for artifact in page:
                    blob = (
                        f"{artifact.data!r}\n{artifact.description or ''}\n{artifact.metadata_!r}"
                    )
                    if needles.found_in(blob):
                        yield "artifact", artifact.id
                if len(page) < _PAGE:
                    break
                offset += _PAGE
            offset = 0
            flows = FlowFilter(name=FlowFilterName(any_=list(FORM_FLOWS)))
            while True:
                runs = client.read_flow_runs(flow_filter=flows, limit=_PAGE, offset=offset)
                for run in runs:
                    for item in client.filter_flow_run_input(run.id, "", 1000, set()):
                        if needles.found_in(item.value):
                            yield "run_input", (run.id, item.key)
                if len(runs) < _PAGE:
                    break
                offset += _PAGE

    def _purge_api(self, needles: Needles) -> list[dict[str, str]]:
        from prefect.client.orchestration import get_client
        from prefect.exceptions import ObjectNotFound

        hits = list(self._api_hits(needles))
        removed = []
        with get_client(sync_client=True) as client:
            for kind, ident in hits:
                try:
                    if kind == "artifact":
                        client.delete_artifact(ident)
                        removed.append({"kind": "prefect.artifact", "id": str(ident)})
                    else:
                        run_id, key = ident
                        client.delete_flow_run_input(UUID(str(run_id)), key)
                        removed.append({"kind": "prefect.run_input", "id": f"{run_id}/{key}"})
                except ObjectNotFound:
                    continue
        return removed

    # -- result storage ----------------------------------------------------------------------

    def _result_files(self) -> list[Path]:
        folder = _local_storage()
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.rglob("*") if p.is_file())

    def _purge_results(self, needles: Needles) -> list[dict[str, str]]:
        removed = []
        for path in self._result_files():
            if needles.found_in(path.read_bytes()):
                path.unlink(missing_ok=True)
                removed.append({"kind": "prefect.result", "id": path.name})
        return removed

    # -- a Prefect SQLite database under the home ---------------------------------------------

    def _databases(self) -> list[Path]:
        return sorted(p for p in self.home.rglob("*.db") if p.is_file() and _is_sqlite(p))

    def _sqlite_hits(
        self, needles: Needles, *, tables: tuple[str, ...] | None
    ) -> Iterator[tuple[str, Any]]:
        for db in self._databases():
            with _sqlite(db) as con:
                yield from ((t, i) for t, i, _ in _rows_holding(con, needles, tables))

    def _purge_sqlite(
        self, needles: Needles, *, tables: tuple[str, ...] | None
    ) -> list[dict[str, str]]:
        removed: list[dict[str, str]] = []
        for db in self._databases():
            with _sqlite(db) as con:
                hits = list(_rows_holding(con, needles, tables))
                for table, ident, id_col in hits:
                    con.execute(f'DELETE FROM "{table}" WHERE "{id_col}" = ?', [ident])
                    removed.append({"kind": f"prefect_db.{table}", "id": str(ident)})
                con.commit()
                if hits or _bytes_hold(db, needles):
                    # free pages and the WAL keep deleted rows' bytes until rewritten
                    con.execute("VACUUM")
                    _truncate_wal(con)
        return removed


def _local_storage() -> Path:
    """Prefect's local result storage, read from its settings only when already loaded."""
    if "prefect.settings" in sys.modules:
        from prefect.settings import get_current_settings

        return Path(get_current_settings().results.local_storage_path).expanduser()
    explicit = os.environ.get("PREFECT_RESULTS_LOCAL_STORAGE_PATH")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser() / "storage"


def _truncate_wal(con: sqlite3.Connection, *, tries: int = 60) -> bool:
    """Checkpoint and truncate the WAL: a running server's readers can hold it for a moment,
    and until it is truncated its old frames keep the deleted rows. True when done."""
    for _ in range(tries):
        busy, _log, _done = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if not busy:
            return True
        time.sleep(0.5)
    logger.warning("prefect database WAL still in use; the home scan will report it")
    return False


def _bytes_hold(db: Path, needles: Needles) -> bool:
    """The database file or its WAL still holds a needle somewhere (a free page, a frame)."""
    files = [db, db.with_name(db.name + "-wal")]
    return any(p.is_file() and needles.found_in(p.read_bytes()) for p in files)


def _is_sqlite(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(16) == b"SQLite format 3\x00"


class _sqlite:  # noqa: N801 - a context manager read like a function
    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> sqlite3.Connection:
        self.con = sqlite3.connect(self.path, timeout=60)
        self.con.execute("PRAGMA busy_timeout = 60000")
        return self.con

    def __exit__(self, *exc: object) -> None:
        self.con.close()


def _rows_holding(
    con: sqlite3.Connection, needles: Needles, tables: tuple[str, ...] | None
) -> Iterator[tuple[str, Any, str]]:
    present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, (id_col, cols) in _SQL_TABLES.items():
        if table not in present or (tables is not None and table not in tables):
            continue
        have = {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}
        text = [c for c in cols if c in have]
        if not text:
            continue
        concat = " || char(10) || ".join(f"coalesce(CAST(\"{c}\" AS TEXT), '')" for c in text)
        plain = needles.plain_strings()
        if not plain:
            return
        coarse = " OR ".join(["instr(t, ?) > 0"] * len(plain))  # then the exact rules
        rows = f'SELECT "{id_col}" AS i, {concat} AS t FROM "{table}"'
        sql = f"SELECT i, t FROM ({rows}) WHERE {coarse}"
        for ident, blob in con.execute(sql, plain).fetchall():
            if needles.found_in(blob or ""):
                yield table, ident, id_col


def prefect_store(home: Path) -> PrefectStore:
    """The orchestrator for ``memctl forget`` and the deletion flow on this home."""
    return PrefectStore(home)
