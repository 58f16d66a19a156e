"""lancedb's import without its REST namespace client's generated API, until something uses it.

Why: ``import lancedb`` imports ``lance_namespace``, which imports the models of
``lance_namespace_urllib3_client``; that package's ``__init__`` then imports its whole
generated REST API as well (nine API classes whose methods pydantic's ``validate_call`` wraps,
each building its schema at import): ~0.5 s of lancedb's ~1 s import on these cores, paid by
every process that opens a store (every ``memctl`` command that reads Lance, the nightly's flow
process, an MCP server) for a client that local and S3 stores never call (BENCHMARKS.md s48).

The package is put in ``sys.modules`` without running its ``__init__``: its submodules (the
models lancedb imports) load as usual, and the first use of a name the ``__init__`` defines
(``ApiClient``, ``TableApi``, ...) runs it then, once (a PEP 562 module ``__getattr__``), so a
REST namespace still works, only its first use pays what the import no longer does.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

__all__ = ["DEFERRED_PACKAGE", "import_lancedb"]

DEFERRED_PACKAGE = "lance_namespace_urllib3_client"

_LOCK = threading.RLock()


def import_lancedb() -> ModuleType:
    """``lancedb``, imported with ``DEFERRED_PACKAGE``'s ``__init__`` deferred (when this
    process has not imported either yet)."""
    with _LOCK:  # not across the import: its own module locks order concurrent imports
        if "lancedb" not in sys.modules:
            _defer_init(DEFERRED_PACKAGE)
    import lancedb

    return lancedb


def _defer_init(name: str) -> None:
    """Register package ``name`` with its ``__init__`` not yet run (nothing if it is imported
    already, or is not a package found on the path)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return
    module = importlib.util.module_from_spec(spec)
    state = {"run": False}

    def __getattr__(attr: str) -> Any:  # noqa: N807 (the module hook's name)
        with _LOCK:  # another thread waits for the __init__ to have run
            if not state["run"]:
                # once: inside the __init__ a missing name is a plain miss, so that its
                # `from package import submodule` imports the submodule
                state["run"] = True
                spec.loader.exec_module(module)
                module.__dict__.pop("__getattr__", None)
        try:
            return module.__dict__[attr]
        except KeyError:
            msg = f"module {name!r} has no attribute {attr!r}"
            raise AttributeError(msg) from None

    module.__getattr__ = __getattr__
    sys.modules[name] = module
