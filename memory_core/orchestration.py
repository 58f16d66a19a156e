"""The orchestrator the library hands its runs to, found at run time through an entry point.

Why: commands such as ``memctl consolidate`` start Prefect runs, yet the library must stay
below the orchestration (memory_core never imports flows or prefect; lint-imports keeps it so).
``flows`` registers itself under the ``memory_core.orchestrator`` entry-point group
(pyproject.toml), the way pytest finds its plugins; the library only knows the interface
below. Nothing is imported until a command needs it, so Prefect stays off the start-up path.
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from memory_core.errors import ConfigError

GROUP = "memory_core.orchestrator"

__all__ = ["GROUP", "Orchestrator", "orchestrator"]


class Orchestrator(Protocol):
    """What the commands ask of the orchestration layer (flows/orchestrator.py)."""

    def run_nightly(
        self, settings: Any, *, now: datetime, recluster: bool = False, sync: bool = False
    ) -> dict[str, Any]: ...
    def register_ephemeral_server(self) -> None: ...
    def prefect_store(self, home: Path) -> Any: ...
    def resume_review_run(self, flow_run_id: str, request: Any) -> Any: ...
    def run_promotion_review(self, settings: Any, batch_id: str) -> Any: ...
    def render_prefect_yaml(self, settings: Any) -> str: ...
    def select(self, names: list[str] | None) -> list[Any]: ...
    def serve_deployments(self, *args: Any, **kwargs: Any) -> Any: ...


@cache
def orchestrator() -> Orchestrator:
    """The installed orchestrator; a clear error when the package was not installed."""
    found = sorted(entry_points(group=GROUP), key=lambda e: e.name)
    if not found:
        msg = (
            f"no orchestrator is installed (entry-point group {GROUP!r}): install the package "
            "with `pip install -e .` so that flows registers itself"
        )
        key = "orchestrator"
        raise ConfigError(key, msg)
    return found[0].load()
