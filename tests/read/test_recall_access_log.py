"""The access log: served records reach JSON-lines files off the query's thread."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

from memory_core.embed import HashEmbedder
from memory_core.read.access_log import AccessLog, closed_files, read_entries
from memory_core.recall import Recaller, recall
from memory_core.stores.lance import LanceStore
from tests.recall_rows import make_row, write_rows

NOW = datetime(2026, 8, 1, tzinfo=UTC)


def _store(settings, embedder: HashEmbedder) -> LanceStore:
    store = LanceStore(settings.lance_uri)
    store.ensure_tables(384)
    write_rows(
        store,
        "facts",
        [
            make_row("facts", embedder, "f1", text="vpn error 720"),
            make_row("facts", embedder, "f2", subject_id=None, text="vpn error 720 shared"),
        ],
    )
    return store


def test_served_records_are_logged_in_the_agreed_format(settings, embedder):
    _store(settings, embedder)
    with Recaller.from_settings(settings, embedder=embedder) as memory:
        result = memory.recall("vpn 720", tenant_id="acme", subject_id="u1", now=NOW)
    (path,) = (settings.home / "access_log").glob("*.jsonl")
    entries = list(read_entries(path))
    assert sorted(e["record_id"] for e in entries) == sorted(result.query_record["selected"])
    assert {json.dumps(sorted(e)) for e in entries} == {
        json.dumps(["at", "record_id", "subject_id", "table", "tenant_id"])
    }
    shared = next(e for e in entries if e["record_id"] == "f2")
    assert shared == {
        "record_id": "f2",
        "table": "facts",
        "tenant_id": "acme",
        "subject_id": None,  # the record's scope, not who asked
        "at": "2026-08-01T00:00:00Z",
    }


def test_one_shot_recall_flushes_and_none_disables(settings, embedder):
    _store(settings, embedder)
    recall("vpn", tenant_id="acme", subject_id="u1", settings=settings, embedder=embedder)
    assert len(list((settings.home / "access_log").glob("*.jsonl"))) == 1
    recall(
        "vpn",
        tenant_id="acme",
        settings=settings,
        embedder=embedder,
        access_log_dir=None,
    )
    (path,) = (settings.home / "access_log").glob("*.jsonl")
    assert len(list(read_entries(path))) == 2  # the second call wrote nothing


def test_logging_never_blocks_or_raises_into_the_query(tmp_path):
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    log = AccessLog(blocked / "access_log", flush_s=0.05, max_queue=10)
    t0 = time.perf_counter()
    log.record({"record_id": str(i)} for i in range(1000))
    assert time.perf_counter() - t0 < 0.5
    log.close()
    assert log.dropped == 1000 and log.written == 0  # 990 queue-full, 10 unwritable


def test_idle_writer_rolls_to_a_new_file_so_folding_never_races_it(tmp_path):
    log = AccessLog(tmp_path, flush_s=0.02, roll_s=0.1)
    log.record([{"record_id": "a"}])
    assert log.flush()
    time.sleep(0.3)
    log.record([{"record_id": "b"}])
    log.close()
    files = sorted(tmp_path.glob("*.jsonl"))
    assert [[e["record_id"] for e in read_entries(f)] for f in files] == [["a"], ["b"]]
    old = time.time() - 120
    os.utime(files[0], (old, old))
    assert closed_files(tmp_path, min_age_s=60) == [files[0]]


def test_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"record_id": "a"}\n{"record_id": "b"}\n{"record_i')
    assert [e["record_id"] for e in read_entries(path)] == ["a", "b"]
