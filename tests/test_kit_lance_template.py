"""tests/kit/lance_template.py: a fresh home's tables copied from the template are the tables
the real ``ensure_tables`` creates, independent of the template, and nothing else is replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from memory_core.stores.lance import LanceStore
from memory_core.stores.schemas import TABLES, schema_for
from tests.kit import lance_template

DIM = 8
kit_on = pytest.mark.skipif(
    lance_template._OFF_FOR_THE_RUN, reason="MEMCTL_TEST_LANCE_TEMPLATE=0: no template this run"
)


def _tables(store: LanceStore) -> dict[str, Any]:
    """What a reader or writer of the home can tell about its tables."""
    out: dict[str, Any] = {}
    for name in TABLES:
        table = store.table(name)
        out[name] = {
            "schema": table.schema,
            "rows": table.count_rows(),
            "version": table.version,
            "versions": [v["version"] for v in table.to_lance().versions()],
            "indices": sorted(
                (i.name, i.index_type, tuple(i.columns), i.num_indexed_rows)
                for i in table.list_indices()
            ),
        }
    return out


def _row(store: LanceStore) -> pa.Table:
    schema = store.table("facts").schema
    row: dict[str, Any] = {f.name: None for f in schema}
    row.update(
        fact_id="f1", predicate="p", object="o", tenant_id="acme", namespace="it",
        status="active", recorded_at=pa.scalar(0, pa.timestamp("us", tz="UTC")).as_py(),
        sensitivity="internal", authority="explicit", content_hash="h", vector=[0.5] * DIM,
    )  # fmt: skip
    return pa.Table.from_pylist([row], schema=schema)


@kit_on
def test_tables_from_the_template_are_what_ensure_tables_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copied = LanceStore(str(tmp_path / "copied"))
    assert copied.ensure_tables(DIM) == list(TABLES)  # as the real call says: all created
    assert DIM in lance_template._templates  # so the tables above are copies
    monkeypatch.setenv("MEMCTL_TEST_LANCE_TEMPLATE", "0")
    created = LanceStore(str(tmp_path / "created"))
    assert created.ensure_tables(DIM) == list(TABLES)

    assert lance_template.enabled() is False
    assert _tables(copied) == _tables(created)
    assert sorted(p.name for p in (tmp_path / "copied").iterdir()) == sorted(
        f"{name}.lance" for name in TABLES
    )  # no partial copy left behind


@kit_on
def test_a_copied_table_is_independent_of_the_template_and_of_other_copies(
    tmp_path: Path,
) -> None:
    first = LanceStore(str(tmp_path / "first"))
    second = LanceStore(str(tmp_path / "second"))
    first.ensure_tables(DIM)
    second.ensure_tables(DIM)
    before = _tables(LanceStore(str(lance_template._templates[DIM])))

    first.upsert("facts", _row(first))
    first.table("facts").optimize()  # folds the row into the copied indices

    assert first.count("facts", "tenant_id = 'acme'") == 1
    assert second.count("facts") == 0
    assert _tables(LanceStore(str(lance_template._templates[DIM]))) == before
    assert _tables(second) == before


def test_a_home_with_any_table_or_another_width_is_left_to_the_real_call(
    tmp_path: Path,
) -> None:
    store = LanceStore(str(tmp_path / "home"))
    store.db.create_table("facts", schema=schema_for("facts", DIM))
    created = store.ensure_tables(DIM)
    assert created == [name for name in TABLES if name != "facts"]  # facts existed: kept
    assert store.table("facts").list_indices() == []  # the real call indexes only new tables
    wider = LanceStore(str(tmp_path / "wider"))
    assert wider.ensure_tables(2 * DIM) == list(TABLES)
    assert wider.vector_dim("facts") == 2 * DIM
