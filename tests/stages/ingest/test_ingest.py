"""Ingestion: validation of every field, all-or-nothing vs quarantine, idempotence, conflicts."""

from __future__ import annotations

import json

import pytest

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.errors import EmbedderMismatch, EpisodeConflict, ValidationFailed
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores
from memory_core.stores.lance import sql_quote
from tests.conftest import NOW, episode, lines_of

BAD_FIELDS = [
    ("episode_id", {"episode_id": ""}, "episode_id"),
    ("missing episode_id", {"episode_id": None}, "episode_id"),
    ("tenant_id", {"tenant_id": None}, "tenant_id"),
    ("subject_id", {"subject_id": 5}, "subject_id"),
    ("namespace", {"namespace": ""}, "namespace"),
    ("session_id", {"session_id": ["x"]}, "session_id"),
    ("occurred_at", {"occurred_at": "yesterday"}, "occurred_at"),
    ("naive occurred_at", {"occurred_at": "2026-07-01T10:00:00"}, "occurred_at"),
    ("recorded_at", {"recorded_at": "2026-13-01T00:00:00Z"}, "recorded_at"),
    ("source_role", {"source_role": "robot"}, "source_role"),
    ("goal", {"goal": 12}, "goal"),
    ("actions", {"actions": "reset"}, "actions"),
    ("empty action", {"actions": ["ok", " "]}, "actions"),
    ("outcome", {"outcome": "great"}, "outcome"),
    ("conditions", {"conditions": {"os": 11}}, "conditions.os"),
    ("observations", {"observations": [1]}, "observations[0]"),
    ("feedback", {"feedback": {"a": 1}}, "feedback"),
    ("text", {"text": 3.5}, "text"),
    ("claims", {"claims": [{"object": "vim"}]}, "claims[0].predicate"),
    ("sensitivity", {"sensitivity": "secret"}, "sensitivity"),
    ("consent_basis", {"consent_basis": 1}, "consent_basis"),
    ("purpose", {"purpose": []}, "purpose"),
    ("expires_at", {"expires_at": "soon"}, "expires_at"),
    ("sources", {"sources": [{"source_id": "doc"}]}, "sources[0].revision"),
    ("procedure_id", {"procedure_id": 3}, "procedure_id"),
    ("procedure_version", {"procedure_version": 2}, "procedure_version"),
    ("vector", {"vector": ["a"]}, "vector[0]"),
    ("vector dim", {"vector": [0.1, 0.2]}, "vector"),
    ("unknown field", {"colour": "red"}, "colour"),
    # issue 18: what used to be stored and then corrupt clustering, recall or deletion
    ("NUL in subject_id", {"subject_id": "u\x001"}, "subject_id"),
    ("newline in episode_id", {"episode_id": "bad\n1"}, "episode_id"),
    ("escape in tenant_id", {"tenant_id": "\x1b[31macme"}, "tenant_id"),
    ("DEL in namespace", {"namespace": "it\x7f"}, "namespace"),
    ("tab in session_id", {"session_id": "s\t1"}, "session_id"),
    ("C1 in procedure_id", {"procedure_id": "p\x851"}, "procedure_id"),
    ("NUL in purpose", {"purpose": "ads\x00"}, "purpose"),
    (
        "NUL in source_id",
        {"sources": [{"source_id": "d\x00", "revision": "1"}]},
        "sources[0].source_id",
    ),
    ("Infinity in vector", {"vector": [float("inf")] + [0.1] * 383}, "vector"),
    ("-Infinity in vector", {"vector": [0.1] * 383 + [float("-inf")]}, "vector"),
    ("vector beyond float32", {"vector": [1e39] + [0.1] * 383}, "vector"),
    ("all-zero vector", {"vector": [0.0] * 384}, "vector"),
]


@pytest.mark.parametrize(("label", "change", "field"), BAD_FIELDS, ids=[b[0] for b in BAD_FIELDS])
def test_each_bad_field_is_reported_with_line_and_field(ingest, stores, label, change, field):
    record = episode(episode_id="bad1")
    for key, value in change.items():
        if value is None:
            record.pop(key, None)
        else:
            record[key] = value
    lines = lines_of(episode(episode_id="good1"), record)
    with pytest.raises(ValidationFailed) as info:
        ingest(lines)
    errors = info.value.errors
    assert [e.line for e in errors] == [2] * len(errors)
    assert any(e.field == field for e in errors), [str(e) for e in errors]
    assert "line 2" in str(info.value)
    assert stores.lance.count("episodes") == 0  # the good line was not written either


def test_invalid_json_line_is_reported(ingest):
    with pytest.raises(ValidationFailed) as info:
        ingest([json.dumps(episode()), "{not json"])
    assert info.value.errors[0].line == 2
    assert "not valid JSON" in info.value.errors[0].reason


def test_every_bad_line_is_reported(ingest):
    lines = lines_of(
        episode(episode_id="a", outcome="x"),
        episode(episode_id="b"),
        episode(episode_id="c", source_role="x"),
    )
    with pytest.raises(ValidationFailed) as info:
        ingest(lines)
    assert sorted({e.line for e in info.value.errors}) == [1, 3]
    assert {e.record_id for e in info.value.errors} == {"a", "c"}


def test_quarantine_writes_good_lines_and_keeps_bad_ones(ingest, stores):
    lines = lines_of(
        episode(episode_id="a"), episode(episode_id="b", outcome="maybe"), episode(episode_id="c")
    )
    result = ingest(lines, quarantine=True)
    assert result.inserted == 2
    assert result.quarantined == 1
    assert stores.lance.count("episodes") == 2
    with stores.meta.connect() as con:
        rows = con.execute("SELECT line_no, episode_id, errors FROM quarantine").fetchall()
    assert len(rows) == 1
    assert rows[0][0] == 2 and rows[0][1] == "b"
    assert json.loads(rows[0][2])[0]["field"] == "outcome"


def test_reingest_is_a_noop(ingest, stores):
    lines = lines_of(episode(episode_id="a"), episode(episode_id="b"))
    first = ingest(lines)
    version = stores.lance.version("episodes")
    second = ingest(lines)
    assert (first.inserted, second.inserted, second.unchanged) == (2, 0, 2)
    assert stores.lance.count("episodes") == 2
    assert stores.lance.version("episodes") == version


def test_same_id_other_content_is_a_conflict_and_writes_nothing(ingest, stores):
    ingest(lines_of(episode(episode_id="a")))
    with pytest.raises(EpisodeConflict) as info:
        ingest(lines_of(episode(episode_id="new"), episode(episode_id="a", outcome="failure")))
    assert info.value.conflicts == [(2, "a")]
    assert "episode_id=a" in str(info.value)
    assert stores.lance.count("episodes") == 1
    assert stores.lance.count("episodes", f"episode_id = {sql_quote('new')}") == 0


def test_conflict_within_one_file(ingest, stores):
    with pytest.raises(EpisodeConflict):
        ingest(lines_of(episode(episode_id="a"), episode(episode_id="a", goal="other")))
    assert stores.lance.count("episodes") == 0


def test_duplicate_identical_line_in_one_file_is_stored_once(ingest, stores):
    result = ingest(lines_of(episode(episode_id="a"), episode(episode_id="a")))
    assert result.inserted == 1
    assert stores.lance.count("episodes") == 1


def _sync(tmp_path):
    """A home with ``embed.at_ingest = true``: ingest embeds before writing (the old way)."""
    settings = load_settings(home=tmp_path / "sync", embed={"model": "hash", "at_ingest": True})
    return settings, open_stores(settings)


def _rows(stores) -> dict[str, dict]:
    table = stores.lance.scan("episodes", columns=["episode_id", "vector", "embedding_version"])
    return {r["episode_id"]: r for r in table.to_pylist()}


def test_supplied_vectors_are_kept_and_missing_ones_left_to_embed(ingest, stores):
    vec = [0.0] * 384
    vec[3] = 1.0
    result = ingest(lines_of(episode(episode_id="a", vector=vec), episode(episode_id="b")))
    assert (result.embedded, result.pending_embedding) == (0, 1)
    rows = _rows(stores)
    assert rows["a"]["vector"][3] == 1.0 and rows["a"]["embedding_version"] == "hash-v1-384"
    assert rows["b"]["vector"] is None and rows["b"]["embedding_version"] == ""


def test_at_ingest_embeds_missing_vectors_before_the_write(tmp_path):
    settings, stores = _sync(tmp_path)
    vec = [0.0] * 384
    vec[3] = 1.0
    lines = lines_of(episode(episode_id="a", vector=vec), episode(episode_id="b"))
    result = ingest_records(stores, settings, RunContext(now=NOW), lines, embedder=HashEmbedder())
    assert (result.embedded, result.pending_embedding) == (1, 0)
    rows = _rows(stores)
    assert rows["a"]["vector"][3] == 1.0
    assert rows["b"]["embedding_version"] == "hash-v1-384" and rows["b"]["vector"] is not None


def test_embedding_cache_avoids_reembedding_same_text(tmp_path):
    settings, stores = _sync(tmp_path)
    run = RunContext(now=NOW)
    ingest_records(
        stores, settings, run, lines_of(episode(episode_id="a")), embedder=HashEmbedder()
    )
    other = lines_of(episode(episode_id="b"))  # same text, other id
    result = ingest_records(stores, settings, run, other, embedder=HashEmbedder())
    assert (result.embedded, result.embed_cache_hits) == (0, 1)


def test_tool_claims_have_no_authority_and_are_counted(ingest, stores):
    tool = episode(
        episode_id="t1",
        source_role="tool",
        claims=[{"predicate": "preferred_destination", "object": "x@evil.example"}],
    )
    user = episode(
        episode_id="u1", source_role="user", claims=[{"predicate": "editor", "object": "vim"}]
    )
    result = ingest(lines_of(tool, user))
    assert result.claims_without_authority == 1
    rows = {
        r["episode_id"]: r
        for r in stores.lance.scan(
            "episodes", columns=["episode_id", "claims", "authority"]
        ).to_pylist()
    }
    assert json.loads(rows["t1"]["claims"])[0]["authority"] == "none"
    assert rows["t1"]["authority"] == "observation"
    assert json.loads(rows["u1"]["claims"])[0]["authority"] == "user_statement"
    with stores.meta.connect() as con:
        counts = con.execute(
            "SELECT counts FROM audit_log WHERE action = 'claims_without_authority'"
        ).fetchall()
    assert json.loads(counts[0][0]) == {"claims": 1}


def test_recorded_at_defaults_to_the_run_clock(ingest, stores):
    ingest(
        lines_of(
            episode(episode_id="a"), episode(episode_id="b", recorded_at="2026-07-02T00:00:00Z")
        )
    )
    rows = {
        r["episode_id"]: r["recorded_at"]
        for r in stores.lance.scan("episodes", columns=["episode_id", "recorded_at"]).to_pylist()
    }
    assert rows["a"].isoformat().startswith("2026-08-01T12:00")
    assert rows["b"].isoformat().startswith("2026-07-02T00:00")


class _OtherModel(HashEmbedder):
    """Same width as the home's embedder, another model."""

    @property
    def version(self) -> str:
        return "all-MiniLM-L6-v2"


def test_episodes_of_another_embedder_are_refused_naming_both(tmp_path):
    settings, stores = _sync(tmp_path)
    run = RunContext(now=NOW)
    first = lines_of(episode(episode_id="a1"))
    ingest_records(stores, settings, run, first, embedder=_OtherModel(384))  # the home's model
    later = lines_of(episode(episode_id="a2", text="another one"))
    with pytest.raises(EmbedderMismatch) as info:
        ingest_records(stores, settings, run, later, embedder=HashEmbedder(384))
    assert "'all-MiniLM-L6-v2'" in str(info.value) and "'hash-v1-384'" in str(info.value)
    assert "MEMCTL_EMBED__MODEL" in str(info.value)
    assert stores.lance.count("episodes") == 1  # nothing of the second file was written
    versions = set(
        stores.lance.scan("episodes", columns=["embedding_version"]).column(0).to_pylist()
    )
    assert versions == {"all-MiniLM-L6-v2"}
    ingest_records(stores, settings, run, later, embedder=_OtherModel(384))  # the home's: fine
    assert stores.lance.count("episodes") == 2
