"""The named status groups: each defined once, and consistent with one another."""

from memory_core import lifecycle
from memory_core.models import Status


def test_served_stale_and_historical_are_disjoint():
    served, stale, hist = set(lifecycle.SERVED), set(lifecycle.STALE), set(lifecycle.HISTORICAL)
    assert not (served & stale or served & hist or stale & hist)


def test_nothing_served_or_current_is_final():
    assert not set(lifecycle.SERVED) & lifecycle.FINAL
    assert not lifecycle.CURRENT & lifecycle.FINAL
    assert lifecycle.WITHDRAWN <= lifecycle.FINAL
    assert set(lifecycle.HISTORICAL) <= lifecycle.FINAL


def test_a_canary_is_served_but_not_current():
    assert "canary" in lifecycle.SERVED and "canary" not in lifecycle.CURRENT


def test_every_status_is_in_a_group_and_rows_compare_as_strings():
    groups = [lifecycle.SERVED, lifecycle.STALE, lifecycle.HISTORICAL, lifecycle.CURRENT,
              lifecycle.FINAL]  # fmt: skip
    for status in Status:
        assert any(status.value in g for g in groups), status
    assert "stale" in lifecycle.CURRENT and "revoked" in lifecycle.WITHDRAWN
