"""tests/kit/meta_template.py: a fresh home copied from the template is the file a fresh
migration writes, and nothing else is replaced by it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memory_core.stores.audit import record_audit
from memory_core.stores.meta import MetaStore, latest_schema_version
from tests.kit import meta_template


def _catalog(path: Path) -> dict[str, Any]:
    meta = MetaStore(path)
    with meta.connect() as con:
        columns = con.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default"
            " FROM information_schema.columns ORDER BY table_name, ordinal_position"
        ).fetchall()
        indexes = con.execute("SELECT index_name, sql FROM duckdb_indexes() ORDER BY 1").fetchall()
        constraints = con.execute(
            "SELECT table_name, constraint_type, constraint_text FROM duckdb_constraints()"
            " ORDER BY 1, 2, 3"
        ).fetchall()
        sequences = con.execute(
            "SELECT sequence_name FROM duckdb_sequences() ORDER BY 1"
        ).fetchall()
        versions = con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()
    return {
        "columns": columns,
        "indexes": indexes,
        "constraints": constraints,
        "sequences": sequences,
        "versions": [v for (v,) in versions],
    }


@pytest.mark.skipif(
    meta_template._OFF_FOR_THE_RUN, reason="MEMCTL_TEST_META_TEMPLATE=0: no template this run"
)
def test_a_fresh_home_from_the_template_is_what_a_fresh_migration_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copied = tmp_path / "copied" / "meta.duckdb"
    assert MetaStore(copied).migrate() == latest_schema_version()
    assert meta_template._template_file() is not None  # so the file above is its copy
    monkeypatch.setenv("MEMCTL_TEST_META_TEMPLATE", "0")
    migrated = tmp_path / "migrated" / "meta.duckdb"
    assert MetaStore(migrated).migrate() == latest_schema_version()

    assert meta_template.enabled() is False
    assert _catalog(copied) == _catalog(migrated)
    assert _catalog(copied)["versions"] == list(range(1, latest_schema_version() + 1))
    assert [p.name for p in copied.parent.iterdir()] == ["meta.duckdb"]  # no copy left behind


def test_an_existing_or_partly_migrated_file_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "home" / "meta.duckdb"
    meta = MetaStore(path)
    assert meta.migrate(target=1) == 1  # another version: the real migration, no template
    with meta.transaction() as con:
        record_audit(con, at=datetime(2026, 1, 1, tzinfo=UTC), action="ingest", target="kept")
    assert meta.migrate() == latest_schema_version()  # exists: migrated, not copied over
    with meta.connect() as con:
        assert con.execute("SELECT target FROM audit_log").fetchall() == [("kept",)]
