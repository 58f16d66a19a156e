"""A fresh test home's DuckDB control plane starts as a copy of one this process migrated.

Most unit tests open a new home (``open_stores`` on a tmp dir), and ``MetaStore.migrate`` then
runs every migration (10 versions, 39 statements) and checkpoints: ~0.08-0.12 CPU s each, 14%
of the in-process CPU of tests/stages/{ingest,review,promote}, tests/stores and tests/read (257
fresh migrations in 266 tests, BENCHMARKS.md s30). While installed, ``migrate()`` to the latest
version of a file that does not exist yet first copies a file that the real ``migrate`` built
in this process (once), then runs the real ``migrate``, which finds it at the latest version
and does nothing. The test still gets real DuckDB, the same tables and rows (the
``schema_version`` rows keep the template's timestamps); only the DDL is not repeated. As
Prefect's database is seeded for its servers (kit/prefect.py ``seed_database``).

Left alone: a file that exists (older versions, newer ones, anything a test wrote first), a
``migrate(target=...)`` to another version, and every subprocess (a forked or spawned ``memctl`` migrates as it always does).
``MEMCTL_TEST_META_TEMPLATE=0`` turns it off for a run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

from memory_core.stores.meta import MetaStore, latest_schema_version

_original_migrate = MetaStore.migrate
_lock = threading.Lock()
_template: dict[str, Path | None] = {}


# read when conftest imports this, before clean_environ drops every MEMCTL_ variable from the
# tests' environment (a test may still switch it off for itself with monkeypatch.setenv)
_OFF_FOR_THE_RUN = os.environ.get("MEMCTL_TEST_META_TEMPLATE") == "0"


def enabled() -> bool:
    return not _OFF_FOR_THE_RUN and os.environ.get("MEMCTL_TEST_META_TEMPLATE", "1") != "0"


def _build() -> Path | None:
    """A migrated, closed control-plane file in this process's temp dir (None if it could not
    be made at rest: then every home migrates itself)."""
    from tests.kit import duckdb_instances

    folder = Path(tempfile.mkdtemp(prefix="meta-template-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "meta.duckdb"
    _original_migrate(MetaStore(path))
    duckdb_instances.release(str(path))  # a kept instance closes: the file is checkpointed
    if any(p.name != path.name for p in folder.iterdir()):  # a WAL left: not at rest
        return None
    return path


def _template_file() -> Path | None:
    with _lock:
        if "path" not in _template:
            _template["path"] = _build()
        return _template["path"]


def _migrate(self: MetaStore, *, target: int | None = None) -> int:
    if enabled() and target in (None, latest_schema_version()) and not self.path.exists():
        template = _template_file()
        if template is not None:
            _place(template, self.path)
    return _original_migrate(self, target=target)


def _place(template: Path, path: Path) -> None:
    """Copy ``template`` to ``path`` unless a file appeared there meanwhile (another thread or
    process creating the same home): the copy is linked into place, never written over one."""
    path.parent.mkdir(parents=True, exist_ok=True)  # as MetaStore.connect does
    partial = path.with_name(f".{path.name}.template-{os.getpid()}-{threading.get_ident()}")
    shutil.copyfile(template, partial)
    try:
        os.link(partial, path)
    except FileExistsError:
        pass
    finally:
        partial.unlink()


def install() -> None:
    """From tests/conftest.py: fresh homes in the test processes start from the template."""
    MetaStore.migrate = _migrate  # type: ignore[method-assign]


__all__ = ["enabled", "install"]
