"""Store boundary: migrations, newer-schema refusal, lock errors, vector dimensions, indices."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime

import pytest

from memory_core.context import Partition
from memory_core.errors import DimensionMismatch, MetaLocked, SchemaTooNew
from memory_core.stores import open_stores
from memory_core.stores.audit import record_audit
from memory_core.stores.meta import MetaStore, latest_schema_version
from memory_core.stores.schemas import FILTER_COLUMNS, TABLES

# no DuckDB instance kept open by the test process (tests/kit/duckdb_instances.py):
# tests of locking between processes
KEEP_DUCKDB_INSTANCES = False


def test_older_file_is_migrated_and_keeps_its_rows(settings):
    meta = MetaStore(settings.meta_path)
    assert meta.migrate(target=1) == 1
    with meta.transaction() as con:
        record_audit(con, at=datetime(2026, 1, 1, tzinfo=UTC), action="ingest", target="old.jsonl")
        tables = {
            r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
    assert "candidates" not in tables
    stores = open_stores(settings)
    assert stores.meta.schema_version() == latest_schema_version()
    with stores.meta.connect() as con:
        assert con.execute("SELECT target FROM audit_log").fetchall() == [("old.jsonl",)]
        con.execute("SELECT count(*) FROM candidates").fetchall()
        versions = [
            r[0] for r in con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()
        ]
    assert versions == list(range(1, latest_schema_version() + 1))


def test_migrate_twice_is_a_noop(settings):
    meta = MetaStore(settings.meta_path)
    meta.migrate()
    meta.migrate()
    with meta.connect() as con:
        assert (
            con.execute("SELECT count(*) FROM schema_version").fetchone()[0]
            == latest_schema_version()
        )


def test_newer_file_is_refused_with_a_clear_message(settings):
    meta = MetaStore(settings.meta_path)
    meta.migrate()
    with meta.connect() as con:
        con.execute("INSERT INTO schema_version VALUES (999, now())")
    with pytest.raises(SchemaTooNew) as info:
        open_stores(settings)
    assert "schema version 999" in str(info.value)
    assert "upgrade memctl" in str(info.value)


def test_lock_held_by_another_process_names_the_holder(settings):
    MetaStore(settings.meta_path).migrate()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import duckdb, sys, time
                con = duckdb.connect({str(settings.meta_path)!r})
                print("locked", flush=True)
                time.sleep(30)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        with (
            pytest.raises(MetaLocked) as info,
            MetaStore(settings.meta_path, lock_timeout_s=0.3).connect(),
        ):
            pass
        assert time.monotonic() - started < 10
        assert f"PID {holder.pid}" in str(info.value)
        assert "locked" in str(info.value)
    finally:
        holder.kill()
        holder.wait()


def test_short_connections_let_two_processes_take_turns(settings):
    meta = MetaStore(settings.meta_path)
    meta.migrate()
    code = textwrap.dedent(
        f"""
        from datetime import UTC, datetime
        from memory_core.stores.meta import MetaStore
        from memory_core.stores.audit import record_audit
        meta = MetaStore({str(settings.meta_path)!r}, lock_timeout_s=20)
        for i in range(20):
            with meta.transaction() as con:
                record_audit(con, at=datetime.now(UTC), action="child")
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    for _ in range(20):
        with MetaStore(settings.meta_path, lock_timeout_s=20).transaction() as con:
            record_audit(con, at=datetime.now(UTC), action="parent")
    assert child.wait(timeout=60) == 0
    with meta.connect() as con:
        counts = dict(con.execute("SELECT action, count(*) FROM audit_log GROUP BY 1").fetchall())
    assert counts == {"child": 20, "parent": 20}


def test_tables_have_scalar_indices_and_dimension_is_checked(stores):
    stores.lance.ensure_tables(384, embedder="hash-v1-384")
    for name in TABLES:
        indexed = {next(iter(i.columns)) for i in stores.lance.table(name).list_indices()}
        assert set(FILTER_COLUMNS) <= indexed, name
    with pytest.raises(DimensionMismatch) as info:
        stores.lance.ensure_tables(16, embedder="hash-v1-16")
    assert "384-d" in str(info.value) and "16-d" in str(info.value)


def test_ingest_with_other_dimension_fails_clearly(stores, settings):
    from memory_core.context import RunContext
    from memory_core.embed import HashEmbedder
    from memory_core.stages.ingest import ingest_records
    from tests.conftest import episode, lines_of

    stores.lance.ensure_tables(384)
    with pytest.raises(DimensionMismatch):
        ingest_records(
            stores, settings, RunContext(), lines_of(episode()), embedder=HashEmbedder(32)
        )


def test_joined_partition_keys_are_migrated_to_unambiguous_ones(settings):
    """Schema 7: "tenant/namespace" ledger keys become JSON arrays; an ambiguous one (two
    partitions could have written it) is dropped, so that partition is consolidated again."""
    meta = MetaStore(settings.meta_path)
    meta.migrate(target=6)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        ("consolidate", "acme/it", "h1"),
        ("consolidate", "team/a/b", "h2"),  # team/a + b, or team + a/b: cannot tell
        ("consolidate", "ünï/support", "h3"),
        ("access_fold", "log/2026-01-01.jsonl#abc", "file"),  # not a partition: untouched
    ]
    with meta.transaction() as con:
        for stage, key, input_hash in rows:
            con.execute(
                "INSERT INTO stage_ledger VALUES (?, ?, ?, 'r1', 'done', ?, ?, '{}')",
                [stage, key, input_hash, at, at],
            )
    meta.migrate()
    with meta.connect() as con:
        got = con.execute(
            "SELECT stage, partition_key, input_hash FROM stage_ledger ORDER BY 1, 3"
        ).fetchall()
    assert got == [
        ("access_fold", "log/2026-01-01.jsonl#abc", "file"),
        ("consolidate", Partition("acme", "it").key, "h1"),
        ("consolidate", Partition("ünï", "support").key, "h3"),
    ]
    assert Partition("team/a", "b").key != Partition("team", "a/b").key
    for partition in (Partition("team/a", "b"), Partition("a", 'b"/]'), Partition("", "")):
        assert Partition.from_key(partition.key) == partition


@pytest.mark.duckdb_at_rest  # reads the WAL file's size
def test_a_session_checkpoints_once_its_wal_passes_the_threshold_it_was_opened_with(settings):
    """What the process pool's writer relies on to bound its memory over a night's session:
    its lower threshold checkpoints inside the session, the default one does not."""
    meta = open_stores(settings).meta
    wal = meta.path.with_name(meta.path.name + ".wal")
    with meta.connect() as con:
        con.execute("CREATE TABLE blobs (i INTEGER, text VARCHAR)")

    def write_and_measure(start: int, **opened_with: str) -> int:
        with meta.session(**opened_with):
            for batch in range(start, start + 4):  # ~4 x 0.6 MB of WAL, a commit each
                with meta.transaction() as con:
                    con.execute(
                        "INSERT INTO blobs SELECT range, repeat(md5(range::VARCHAR), 20) "
                        "FROM range(?, ?)",
                        [batch * 1000, batch * 1000 + 1000],
                    )
            return wal.stat().st_size if wal.exists() else 0

    assert write_and_measure(0) > 1 << 20  # the default's 1 GB: all of it still in the WAL
    assert write_and_measure(10, checkpoint_threshold="1MB") < 1 << 20
    with meta.connect() as con:
        assert con.execute("SELECT count(*) FROM blobs").fetchone() == (8000,)


@pytest.mark.duckdb_at_rest  # reads the WAL file's size
def test_a_checkpoint_behind_empties_the_wal_while_the_session_goes_on(settings, caplog):
    """The night starts its session's checkpoint before its last steps: the WAL goes into the
    file while the session stays open and other tables are read; a write transaction open
    elsewhere makes it fail without harm (logged, the WAL left to the session's close)."""
    meta = open_stores(settings).meta
    wal = meta.path.with_name(meta.path.name + ".wal")
    with meta.connect() as con:
        con.execute("CREATE TABLE blobs (i INTEGER, text VARCHAR)")
    assert meta.checkpoint_behind() is None  # no session: nothing to write behind

    def write(start: int) -> None:
        with meta.transaction() as con:
            con.execute(
                "INSERT INTO blobs SELECT range, repeat(md5(range::VARCHAR), 20) FROM range(?, ?)",
                [start, start + 4000],
            )

    with meta.session():
        write(0)
        assert wal.stat().st_size > 1 << 20  # the session's 1 GB threshold kept it all
        behind = meta.checkpoint_behind()
        assert behind is not None
        with meta.connect() as con:  # another table, read meanwhile
            assert con.execute("SELECT count(*) FROM schema_version").fetchone()[0] > 0
        behind.join()
        assert not wal.exists() or wal.stat().st_size < 1 << 20
        write(4000)
        with caplog.at_level("WARNING", logger="memory_core.stores.meta"), meta.connect() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute("UPDATE blobs SET text = 'open' WHERE i = 0")  # DuckDB refuses
            failed = meta.checkpoint_behind()
            assert failed is not None
            failed.join()
            con.execute("COMMIT")
        assert "left to the session's close" in caplog.text
        assert wal.stat().st_size > 1 << 20
    assert not wal.exists() or wal.stat().st_size < 1 << 20  # the close checkpointed
    with meta.connect() as con:
        assert con.execute(
            "SELECT count(*), count(*) FILTER (text = 'open') FROM blobs"
        ).fetchone() == (8000, 1)
