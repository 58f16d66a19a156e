"""Issue 18: deletion reaches every byte under the home, or the receipt says it did not.

Each test is one finding of the outside test: freed DuckDB pages, a quarantined line whose
truncated JSON names the subject, the demo's input copies, and a file the product does not
own (which must turn ``verified`` false rather than be ignored).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from memory_core.context import Partition, RunContext
from memory_core.stages.cluster import cluster_partition
from memory_core.stages.forget import forget_subject
from memory_core.stages.mine import mine_partition
from memory_core.stores.residue import (
    Needles,
    _file_holds,
    _holds_name,
    _holds_plain,
    _windows,
    scan_home,
    shadows_of,
)
from tests.conftest import NOW, episode, lines_of

SUBJECT = "quentin.privacy"
SAID = "Please send my payslips to the Basel office from now on."


def _statements(subject: str = SUBJECT, tenant: str = "acme") -> list[str]:
    return lines_of(
        *[
            episode(
                episode_id=f"{subject}-{i}",
                tenant_id=tenant,
                subject_id=subject,
                source_role="user",
                text=SAID,
                occurred_at=f"2026-07-0{i + 1}T10:00:00Z",
                claims=[{"predicate": "payslip_office", "object": "Basel", "span": SAID}],
            )
            for i in range(3)
        ]
    )


def _consolidate(stores, settings) -> None:
    ctx = RunContext(now=NOW)
    cluster_partition(stores, settings.cluster, ctx, Partition("acme", "it"))
    mine_partition(stores, settings, ctx, Partition("acme", "it"))


def _bytes_naming(home: Path, *needles: str) -> list[str]:
    return [
        str(p.relative_to(home))
        for p in sorted(home.rglob("*"))
        if p.is_file() and any(n.encode() in p.read_bytes() for n in needles)
    ]


@pytest.mark.duckdb_at_rest  # reads meta.duckdb's bytes
def test_no_freed_duckdb_page_keeps_the_subject(stores, settings, ingest):
    ingest([*_statements(), *lines_of(episode(episode_id="other", subject_id="olga.other"))])
    _consolidate(stores, settings)
    meta = settings.home / "meta.duckdb"
    assert SUBJECT.encode() in meta.read_bytes()  # candidates and evidence name the subject
    receipt = forget_subject(stores, settings, RunContext(now=NOW), SUBJECT)
    assert receipt["verification"]["verified"], receipt["verification"]
    assert SUBJECT.encode() not in meta.read_bytes()  # no live row, and no freed page
    assert not list(settings.home.glob("meta.duckdb.*"))  # no WAL or half-written copy
    with stores.meta.connect() as con:
        assert con.execute("SELECT count(*) FROM schema_version").fetchone()[0] >= 1
    assert stores.lance.count("episodes", "subject_id = 'olga.other'") == 1


def test_rewritten_meta_file_keeps_schema_constraints_and_rows(stores, settings, ingest):
    ingest([*_statements(subject="olga.other")])
    _consolidate(stores, settings)

    def shape() -> tuple:
        with stores.meta.connect() as con:
            tables = con.execute(
                "SELECT table_name, sql FROM duckdb_tables() ORDER BY 1"
            ).fetchall()
            constraints = con.execute(
                "SELECT table_name, constraint_type, constraint_text FROM duckdb_constraints() "
                "ORDER BY ALL"
            ).fetchall()
            indexes = con.execute(
                "SELECT index_name, sql FROM duckdb_indexes() ORDER BY 1"
            ).fetchall()
            counts = {
                t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t, _ in tables
            }
        return tables, constraints, indexes, counts

    before = shape()
    stores.meta.rewrite()
    assert shape() == before


def test_truncated_quarantined_line_naming_the_subject_is_deleted(stores, settings, ingest):
    cut = json.dumps(episode(episode_id="cut1", subject_id=SUBJECT, text=SAID))
    cut = cut[: cut.index(SUBJECT) + len(SUBJECT)]  # ..."subject_id": "quentin.privacy
    kept = json.dumps(episode(episode_id="cut2", subject_id="quentin.privacyx"))[:60]
    result = ingest([*_statements(), cut, kept], quarantine=True)
    assert result.quarantined == 2
    receipt = forget_subject(stores, settings, RunContext(now=NOW), SUBJECT, tenant_id="acme")
    assert receipt["verification"]["verified"], receipt["verification"]
    with stores.meta.connect() as con:
        raws = [r[0] for r in con.execute("SELECT raw FROM quarantine").fetchall()]
    assert raws == [kept]  # a longer id that merely starts with the subject's is another's
    assert _bytes_naming(settings.home, f'{SUBJECT}"', f"{SUBJECT},") == []


def test_verification_finds_a_truncated_line_it_did_not_delete(stores, settings, ingest):
    """The checker does not trust the deleter: a line left behind turns verified false."""
    cut = json.dumps(episode(episode_id="cut1", subject_id=SUBJECT))
    cut = cut[: cut.index(SUBJECT) + len(SUBJECT)]
    ingest([*_statements(), cut], quarantine=True)
    with stores.meta.transaction() as con:  # an operator's note no deletion rule knows
        con.execute(
            "INSERT INTO audit_log VALUES ('ev-x', now(), NULL, 'ops', 'note', NULL, NULL, "
            "NULL, ?::JSON)",
            [json.dumps({"note": "ticket mentions " + SUBJECT + " twice"})],
        )
    receipt = forget_subject(stores, settings, RunContext(now=NOW), SUBJECT)
    assert not receipt["verification"]["verified"]
    assert receipt["verification"]["residue"] == {
        "duckdb.audit_log": 1,
        "home_files": ["meta.duckdb"],
    }


def test_demo_input_copies_lose_the_subject(stores, settings, ingest):
    demo = settings.home / "demo"
    demo.mkdir(parents=True)
    lines = _statements()
    (demo / "episodes.jsonl").write_text("".join(x + "\n" for x in [*lines, *_statements("olga")]))
    truth = {"preferences": [{"subject_ids": [SUBJECT, "olga"], "object": "Basel"}]}
    (demo / "truth.json").write_text(json.dumps(truth))
    ingest(lines)
    receipt = forget_subject(stores, settings, RunContext(now=NOW), SUBJECT)
    assert receipt["product_inputs_scrubbed"] == {"demo/episodes.jsonl": 3, "demo/truth.json": 1}
    assert receipt["verification"]["verified"], receipt["verification"]
    assert _bytes_naming(settings.home, SUBJECT) == []
    kept = (demo / "episodes.jsonl").read_text().splitlines()
    assert len(kept) == 3 and all(json.loads(x)["subject_id"] == "olga" for x in kept)
    assert json.loads((demo / "truth.json").read_text())["preferences"][0]["subject_ids"] == [
        "olga"
    ]


def test_a_file_the_product_does_not_own_makes_the_receipt_unverified(stores, settings, ingest):
    ingest(_statements())
    (settings.home / "notes").mkdir(parents=True)
    (settings.home / "notes" / "export.csv").write_text(f"{SUBJECT},Basel\n")
    receipt = forget_subject(stores, settings, RunContext(now=NOW), SUBJECT)
    assert receipt["verification"]["verified"] is False
    assert receipt["verification"]["residue"] == {"home_files": ["notes/export.csv"]}
    with stores.meta.connect() as con:
        status = con.execute("SELECT status FROM deletion_requests").fetchall()
        stored = con.execute("SELECT body FROM receipts WHERE kind = 'forget_subject'").fetchone()
    assert status == [("unverified",)]
    assert json.loads(stored[0])["verification"]["verified"] is False
    assert SUBJECT not in json.dumps(receipt)


def test_scan_matches_whole_names_only():
    needles = Needles.of(["ann.lee"], ["ep_0123456789abcdef"], [SAID])
    assert needles.found_in(b'{"subject_id": "ann.lee"}') == ["name"]
    assert needles.found_in(b"ann.leeds and joann.lee") == []
    assert needles.found_in(b"x ep_0123456789abcdef " + SAID.encode()) == ["id", "text"]
    short = Needles.of(["u1"])
    assert short.found_in(b'"u1"') == ["name"] and short.found_in(b"\x00u1\x00") == []


def test_scan_home_reads_every_file(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "blob.bin").write_bytes(b"\x00\x01zoe.smith\x00")
    (tmp_path / "empty").write_bytes(b"")
    assert scan_home(tmp_path, Needles.of(["zoe.smith"])) == ["a/b/blob.bin"]


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(["u1", "ann.lee", "zoë", "s00042", 'q"x']),
    parts=st.lists(
        st.sampled_from(["u1", "ann.lee", "zoë", "s00042", '"', "\\", "a", ".", " ", "\x00", "-"]),
        max_size=14,
    ),
)
def test_literal_first_scan_answers_as_the_full_pattern_search(name, parts):
    """``_holds_name`` (find the literal, try the pattern there) == ``pattern.search``."""
    needles = Needles.of([name])
    data = "".join(parts).encode()
    expected = any(p.search(data) for p in needles._name_patterns())
    assert _holds_name(data, needles._name_probes()) is expected


def test_an_id_inside_a_kept_id_is_not_residue(tmp_path):
    """Arrow pages store strings back to back: the forgotten ``conv-43:D2:1`` is a prefix of
    the kept ``conv-43:D2:10``, which must not be read as residue; a real copy still is."""
    page = tmp_path / "page.lance"
    page.write_bytes(b"\x00conv-43:D2:10conv-43:D2:12\x00")
    needles = Needles.of([], ["conv-43:D2:1"])
    asked: list[list[str]] = []

    def kept(ids):
        asked.append(list(ids))
        return ["conv-43:D2:10", "conv-43:D2:12", "other:conv-43:D2:11"]

    assert scan_home(tmp_path, needles) == ["page.lance"]  # without the kept ids: flagged
    assert scan_home(tmp_path, needles, kept_ids=kept) == []
    assert asked == [["conv-43:D2:1"]]
    page.write_bytes(b"\x00conv-43:D2:10conv-43:D2:1conv-43:D2:12\x00")  # a real copy between
    assert scan_home(tmp_path, needles, kept_ids=kept) == ["page.lance"]
    page.write_bytes(b"\x00nothing here\x00")
    assert scan_home(tmp_path, needles, kept_ids=lambda ids: asked.append(["again"]) or []) == []
    assert len(asked) == 2  # a clean home never asks for the kept ids


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    suffixes=st.lists(st.text("0123456789:", min_size=1, max_size=3), min_size=1, max_size=6),
    prefixes=st.lists(st.text("abz-", min_size=1, max_size=3), max_size=3),
    order=st.randoms(use_true_random=False),
    planted=st.booleans(),
)
def test_kept_ids_excuse_only_their_own_bytes(suffixes, prefixes, order, planted):
    """Whatever kept ids contain the forgotten one, at either end, a page of only kept ids is
    clean and the forgotten id written once on its own is found."""
    forgotten = "sess-7:turn-1"
    kept = sorted({forgotten + s for s in suffixes} | {p + forgotten for p in prefixes})
    stored = list(kept)
    order.shuffle(stored)
    data = "".join(stored).encode() + (b"\x00" + forgotten.encode() if planted else b"")
    needles = Needles.of([], [forgotten])
    shadows = shadows_of(needles, kept)
    assert any(_holds_plain(data, x, shadows) for x in needles._plain()) is planted
    assert any(forgotten.encode() in k.encode() for k in kept)  # so a plain find would flag it


_PIECES = ["u1", "ann.lee", "sess-7:turn-1", "sess-7:turn-10", '"', "\\", "a", ".", "\x00", "-"]


@hypothesis_settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(st.sampled_from(_PIECES), max_size=40),
    name=st.sampled_from(["u1", "ann.lee"]),
    kept=st.booleans(),
    chunk=st.integers(min_value=1, max_value=40),
)
def test_a_file_read_in_chunks_answers_as_the_whole_file(tmp_path_factory, parts, name, kept,
                                                         chunk):  # fmt: skip
    """The scan reads a file in chunks with context around each: whatever the chunk size,
    wherever a name, an id or the kept id excusing it falls across a boundary, the answer is
    the one over the whole file at once."""
    data = "".join(parts).encode()
    path = tmp_path_factory.mktemp("chunks") / "page.bin"
    path.write_bytes(data)
    needles = Needles.of([name], ["sess-7:turn-1"])
    probes, plain = needles._name_probes(), needles._plain()
    shadows = shadows_of(needles, ["sess-7:turn-10"]) if kept else {}
    whole = _holds_name(data, probes) or any(_holds_plain(data, x, shadows) for x in plain)
    # the context the product keeps (4 KB) covers a quoted name's escape backslashes; here,
    # as little as this file needs, so that a short file spans several windows
    run = max((len(r) for r in re.findall(rb"\\+", data)), default=0)
    assert _file_holds(path, probes, plain, shadows, chunk=chunk, context=run + 1) is whole


@pytest.mark.parametrize(
    ("core", "kept", "expected"),
    [
        (b"xann.lee.", (), False),  # inside a longer id: not the name
        (b"\x00ann.lee\x00", (), True),
        (b'"u1\\\\"', (), True),  # quoted, escaped
        (b"sess-7:turn-10sess-7:turn-10", ("sess-7:turn-10",), False),  # the kept id's
        (b"sess-7:turn-10sess-7:turn-1", ("sess-7:turn-10",), True),
        (b"\x00ann.lee", (), True),  # the last bytes: nothing after the name
        (b"sess-7:turn-10" * 3 + b"sess-7:turn-1", ("sess-7:turn-10",), True),
    ],
)
def test_every_chunk_boundary_keeps_the_answer(tmp_path, core, kept, expected):
    """Each crafted page at every offset and chunk size: a boundary before, inside or after
    the name, the id or the kept id around it changes nothing."""
    needles = Needles.of(["ann.lee", "u1"], ["sess-7:turn-1"])
    probes, plain = needles._name_probes(), needles._plain()
    shadows = shadows_of(needles, kept)
    path = tmp_path / "page.bin"
    pages = [b"\x00" * pad + core + b"\x00" * (48 - pad) for pad in range(48)]
    pages += [b"zz.zz" * 9 + b"\x00" + core]  # at the very end, after id bytes
    for page in pages:
        path.write_bytes(page)
        for chunk in range(1, 24):
            found = _file_holds(path, probes, plain, shadows, chunk=chunk, context=2)
            assert found is expected, (page, chunk)


def test_bytes_past_the_end_of_a_window_are_not_read():
    """The reused buffer holds an older chunk's bytes past ``end``: they neither complete a
    kept id around the needle nor stand after a name."""
    needles = Needles.of(["ann.lee"], ["sess-7:turn-1"])
    shadows = shadows_of(needles, ["sess-7:turn-10"])
    page = b"sess-7:turn-10"
    assert not _holds_plain(page, b"sess-7:turn-1", shadows)
    assert _holds_plain(page, b"sess-7:turn-1", shadows, end=len(page) - 1)
    assert not _holds_name(b"\x00ann.leex", needles._name_probes())
    assert _holds_name(b"\x00ann.leex", needles._name_probes(), end=8)


def test_a_file_that_shrinks_while_it_is_scanned_ends_the_scan(tmp_path):
    """A write-ahead log truncated at a checkpoint while the scan reads it: the scan sees a
    shorter file and goes on (a memory-mapped read of the lost pages killed the process)."""
    path = tmp_path / "db.wal"
    path.write_bytes(b"x" * 64 + b"\x00ann.lee\x00" + b"y" * 64)
    seen = []
    with path.open("rb", buffering=0) as fh:
        for data, lo, hi, _ in _windows(fh, margin=8, chunk=16):
            seen.append(bytes(data[lo:hi]))
            if len(seen) == 1:
                with path.open("r+b") as other:
                    other.truncate(20)
    assert b"".join(seen) == b"x" * 32  # what was read before the cut, each byte once
    assert scan_home(tmp_path, Needles.of(["ann.lee"])) == []
    path.write_bytes(b"x" * 64 + b"\x00ann.lee\x00" + b"y" * 64)
    assert scan_home(tmp_path, Needles.of(["ann.lee"])) == ["db.wal"]


def test_forgetting_a_subject_whose_ids_prefix_anothers_is_verified(stores, settings, ingest):
    """LoCoMo's turns: one speaker's ``conv:D1:1`` is a prefix of the other's ``conv:D1:10``."""
    said = "We talked about the long hike up to the lake last weekend."
    rows = [
        episode(
            episode_id=f"conv-43:D1:{i}", tenant_id="acme",
            subject_id="tim" if i % 2 else "john", source_role="user",
            text=f"{said} Turn {i}.", occurred_at=f"2026-07-01T10:{i:02d}:00Z",
        )
        for i in range(1, 14)
    ]  # fmt: skip
    ingest(lines_of(*rows))
    _consolidate(stores, settings)
    receipt = forget_subject(stores, settings, RunContext(now=NOW), "tim", tenant_id="acme")
    assert receipt["verification"]["verified"], receipt["verification"]
    kept = stores.lance.scan("episodes", columns=["episode_id"]).column(0).to_pylist()
    assert sorted(kept) == sorted(f"conv-43:D1:{i}" for i in range(2, 14, 2))
    (settings.home / "notes").mkdir(parents=True)
    (settings.home / "notes" / "copy.txt").write_text("conv-43:D1:3\n")  # one of tim's ids
    receipt = forget_subject(stores, settings, RunContext(now=NOW), "john", tenant_id="acme")
    assert receipt["verification"]["verified"], receipt["verification"]  # not john's ids
