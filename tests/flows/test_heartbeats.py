"""Flow runs against this process's own ephemeral server send no heartbeats (Prefect joins
its heartbeat thread, which sleeps in one-second steps, at the end of every run); a
configured API or a frequency the user chose keeps Prefect's setting."""

from __future__ import annotations

from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

from flows.ephemeral import no_heartbeats_to_an_ephemeral_server

# Prefect's defaults for both (the suite's harness turns heartbeats off: tests/kit/prefect.py)
DEFAULTS = {PREFECT_API_URL, "flows.heartbeat_frequency"}


def _frequency() -> int | None:
    return get_current_settings().flows.heartbeat_frequency


def test_an_ephemeral_server_gets_no_heartbeats():
    with temporary_settings(restore_defaults=DEFAULTS):
        before = _frequency()
        assert before is not None  # Prefect's default sends them
        with no_heartbeats_to_an_ephemeral_server():
            assert _frequency() is None
        assert _frequency() == before  # only for the runs inside


def test_a_configured_api_keeps_heartbeats():
    api = {PREFECT_API_URL: "http://127.0.0.1:9/api"}
    with temporary_settings(updates=api, restore_defaults={"flows.heartbeat_frequency"}):
        before = _frequency()
        with no_heartbeats_to_an_ephemeral_server():
            assert _frequency() == before is not None


def test_a_frequency_the_user_set_is_kept():
    chosen = {"flows.heartbeat_frequency": 45}  # as PREFECT_FLOWS_HEARTBEAT_FREQUENCY=45 does
    with (
        temporary_settings(updates=chosen, restore_defaults={PREFECT_API_URL}),
        no_heartbeats_to_an_ephemeral_server(),
    ):
        assert _frequency() == 45
