"""A commit group's partitions share their mining-unit, watermark and ledger statements
(``save_partitions_units``, ``stage_ledger.record_done``): after any sequence of grouped writes
the stored rows are what a plain model of one partition's writes at a time holds."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.config import load_settings
from memory_core.context import Partition
from memory_core.stages.stage_ledger import Done, LedgeredWork, record_done
from memory_core.stores import open_stores
from memory_core.stores.meta import MetaStore
from memory_core.stores.mine_units import UnitSave, load_units, save_partitions_units

T0 = datetime(2026, 7, 1, tzinfo=UTC)
PARTITIONS = [("acme", "it"), ("acme", "ops"), ("beta", "it")]
UNITS = [f"code:{i}" for i in range(4)]


@contextmanager
def _fresh_meta() -> Iterator[MetaStore]:
    """A new home's control plane for each example (hypothesis runs many in one test)."""
    with tempfile.TemporaryDirectory() as tmp:
        yield open_stores(load_settings(home=Path(tmp), embed={"model": "hash"})).meta


# one partition's save: its units (key -> fingerprint digit) and the stored units it keeps
unit_save = st.tuples(
    st.sampled_from(range(len(PARTITIONS))),
    st.dictionaries(st.sampled_from(UNITS), st.integers(0, 2), max_size=3),
    st.sets(st.sampled_from(UNITS), max_size=3),
)
# a commit group: saves of distinct partitions
unit_group = st.lists(unit_save, min_size=1, max_size=len(PARTITIONS), unique_by=lambda s: s[0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.lists(unit_group, min_size=1, max_size=4))
def test_grouped_unit_saves_are_each_partitions_own(
    groups: list[list[tuple[int, dict[str, int], set[str]]]],
) -> None:
    model: dict[tuple[str, str], dict[str, str]] = {p: {} for p in PARTITIONS}
    with _fresh_meta() as meta:
        for night, group in enumerate(groups):
            saves = []
            for part, units, keep in group:
                tenant, namespace = PARTITIONS[part]
                fingerprints = {
                    u: (f"fp{n}", {"ids": [u], "night": night}) for u, n in units.items()
                }
                saves.append(UnitSave(tenant, namespace, fingerprints, keep))
                stored = model[(tenant, namespace)]
                model[(tenant, namespace)] = {
                    **{u: fp for u, fp in stored.items() if u in keep},
                    **{u: fp for u, (fp, _) in fingerprints.items()},
                }
            save_partitions_units(meta, saves, run_id=f"r{night}", now=T0 + timedelta(days=night))
            for tenant, namespace in PARTITIONS:
                got = load_units(meta, tenant, namespace)
                assert {u: fp for u, (fp, _) in got.items()} == model[(tenant, namespace)]


# one unit of work: its partition, input hash digit and watermark day (None: moves none)
work = st.tuples(
    st.sampled_from(range(len(PARTITIONS))),
    st.integers(0, 2),
    st.one_of(st.none(), st.integers(0, 5)),
)
work_group = st.lists(work, min_size=1, max_size=len(PARTITIONS), unique_by=lambda w: w[0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.lists(work_group, min_size=1, max_size=4))
def test_grouped_ledger_writes_are_each_units_own(
    groups: list[list[tuple[int, int, int | None]]],
) -> None:
    """A watermark only moves forward; a ledger entry, once there, keeps its first run."""
    marks: dict[tuple[str, str], datetime] = {}
    entries: dict[tuple[str, str], str] = {}
    with _fresh_meta() as meta:
        for night, group in enumerate(groups):
            done = []
            for part, digit, day in group:
                tenant, namespace = PARTITIONS[part]
                at = None if day is None else T0 + timedelta(days=day)
                unit = LedgeredWork("consolidate", Partition(tenant, namespace), f"h{digit}", at)
                done.append(Done(unit, {"n": night}, T0, T0))
                if at is not None:
                    marks[(tenant, namespace)] = max(marks.get((tenant, namespace), at), at)
                entries.setdefault((unit.partition.key, f"h{digit}"), f"r{night}")
            record_done(meta, done, run_id=f"r{night}", now=T0 + timedelta(days=night))
        with meta.connect() as con:
            stored_marks = con.execute(
                "SELECT tenant_id, namespace, recorded_at FROM watermarks"
            ).fetchall()
            stored_entries = con.execute(
                "SELECT partition_key, input_hash, run_id, status FROM stage_ledger"
            ).fetchall()
        assert {(t, n): at for t, n, at in stored_marks} == marks
        assert {(k, h): (r, s) for k, h, r, s in stored_entries} == {
            key: (run, "done") for key, run in entries.items()
        }
