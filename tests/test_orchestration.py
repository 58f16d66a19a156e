"""The library reaches the orchestration layer only through its entry point."""

from __future__ import annotations

import inspect

from memory_core.orchestration import Orchestrator, orchestrator


def test_flows_provides_every_function_the_commands_ask_for() -> None:
    found = orchestrator()
    assert found.__name__ == "flows.orchestrator"
    wanted = {n for n, _ in inspect.getmembers(Orchestrator) if not n.startswith("_")}
    assert wanted, "the interface names the functions"
    for name in sorted(wanted):
        assert callable(getattr(found, name)), name
        # same keyword parameters as the interface promises
        promised = set(inspect.signature(getattr(Orchestrator, name)).parameters) - {"self"}
        given = set(inspect.signature(getattr(found, name)).parameters)
        assert promised <= given or "kwargs" in given, name
