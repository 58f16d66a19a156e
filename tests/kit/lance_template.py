"""A fresh test home's Lance tables start as a copy of ones this process created once.

``LanceStore.ensure_tables`` on a new home creates four empty tables and 20 scalar indices
(~40 ms CPU each time, 642 calls and 25.8 CPU s over tests/stages, tests/stores and
tests/read; BENCHMARKS.md s31). While installed, ``ensure_tables`` on a local home that has
none of the tables yet first copies the table directories that the real ``ensure_tables``
built, for the same vector width, in this process's temp dir (once), then runs the real
``ensure_tables``, which finds them, checks their width and creates nothing. The result is
what the real call returns (the names of the tables now created). The test still gets real
Lance tables with the same schema, indices and version history: a Lance table is a
directory whose manifests name their data, index and transaction files by relative paths,
so the copy is an independent table (tests/test_kit_lance_template.py writes to one and reads
the template unchanged). Only the manifests' timestamps are the template's, as the
``schema_version`` rows of kit/meta_template.py are; the home's own versions prune with
``older_than`` measured in hours (default 0), so no test sees the difference.

Left alone: a home that has any of the tables (the real call does what it always does),
remote stores (``storage_options`` or a URI with a scheme), and every subprocess (a forked
or spawned ``memctl`` creates its tables itself). ``MEMCTL_TEST_LANCE_TEMPLATE=0`` turns it
off for a run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

from memory_core.stores.lance import LanceStore
from memory_core.stores.schemas import TABLES

_original_ensure_tables = LanceStore.ensure_tables
_lock = threading.Lock()
_templates: dict[int, Path] = {}


# read when conftest imports this, before clean_environ drops every MEMCTL_ variable from the
# tests' environment (a test may still switch it off for itself with monkeypatch.setenv)
_OFF_FOR_THE_RUN = os.environ.get("MEMCTL_TEST_LANCE_TEMPLATE") == "0"


def enabled() -> bool:
    return not _OFF_FOR_THE_RUN and os.environ.get("MEMCTL_TEST_LANCE_TEMPLATE", "1") != "0"


def _local_dir(store: LanceStore) -> Path | None:
    """The home's Lance directory if it is a plain local path (not s3:// or file://...)."""
    if store.storage_options or "://" in store.uri:
        return None
    return Path(store.uri)


def _template_dir(dim: int) -> Path:
    """Empty tables of vector width ``dim``, built by the real ``ensure_tables`` (once per
    width per process)."""
    with _lock:
        if dim not in _templates:
            folder = Path(tempfile.mkdtemp(prefix="lance-template-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _original_ensure_tables(LanceStore(str(folder / "lance")), dim)
            _templates[dim] = folder / "lance"
        return _templates[dim]


def _ensure_tables(self: LanceStore, dim: int, *, embedder: str = "") -> list[str]:
    home = _local_dir(self) if enabled() else None
    copied: list[str] = []
    if home is not None and not any((home / f"{name}.lance").exists() for name in TABLES):
        template = _template_dir(dim)
        copied = [name for name in TABLES if _place(template / f"{name}.lance", home)]
    return copied + _original_ensure_tables(self, dim, embedder=embedder)


def _place(table: Path, home: Path) -> bool:
    """Copy one table directory into ``home`` unless one appeared there meanwhile (another
    thread or process creating the same home): copied beside it, then renamed into place."""
    home.mkdir(parents=True, exist_ok=True)
    target = home / table.name
    partial = home / f".{table.name}.template-{os.getpid()}-{threading.get_ident()}"
    shutil.copytree(table, partial)
    try:
        partial.rename(target)  # refuses a directory already there (unless still empty)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        return False
    return True


def install() -> None:
    """From tests/conftest.py: fresh homes in the test processes start from the template."""
    LanceStore.ensure_tables = _ensure_tables  # type: ignore[method-assign]


__all__ = ["enabled", "install"]
