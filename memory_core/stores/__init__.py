"""Store boundary: Lance (what agents read) and DuckDB (the pipeline's control plane).

``MetaStore`` (and with it DuckDB) is imported lazily: the read path agents embed
(``memory_core.recall``) reaches Lance through this package and must not load DuckDB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memory_core.config import Settings
from memory_core.stores.lance import LanceStore

if TYPE_CHECKING:
    from memory_core.stores.meta import MetaStore

__all__ = ["LanceStore", "MetaStore", "Stores", "open_stores"]


def __getattr__(name: str) -> Any:
    if name == "MetaStore":
        from memory_core.stores.meta import MetaStore

        return MetaStore
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


@dataclass
class Stores:
    """The dependency bundle every stage takes first."""

    lance: LanceStore
    meta: MetaStore


def open_stores(settings: Settings, *, migrate: bool = True) -> Stores:
    """Open both stores; migrate an older metadata file, refuse a newer one."""
    from memory_core.stores.meta import MetaStore

    meta = MetaStore(settings.meta_path, lock_timeout_s=settings.stores.lock_timeout_s)
    if migrate:
        meta.migrate()
    else:
        meta.check_version()
    lance = LanceStore(settings.lance_uri, storage_options=settings.stores.storage_options)
    return Stores(lance=lance, meta=meta)
