"""Lazy package exports: a stage package names its entry points without importing them.

Why lazy: stage packages use each other (review commits through promote, promote checks review's
decisions), so a package ``__init__`` that imported its modules eagerly would run into a
half-initialised sibling. With PEP 562's module ``__getattr__`` the package says what it
exports, and ``from memory_core.stages.review import decide_batch`` imports only
``review/stage.py`` when the name is first asked for. Modules inside ``memory_core/stages``
import from the defining module, never through a package.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: dict[str, list[str]]
) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for ``package``, from {module: [names it exports]}."""
    where = {name: module for module, names in exports.items() for name in names}

    def exported(name: str) -> Any:
        module = where.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        return getattr(import_module(f"{package}.{module}"), name)

    return sorted(where), exported
