"""The read path: hard filters before ranking, as-of answers, procedures, packing, explain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory_core.config import Settings
from memory_core.embed import HashEmbedder
from memory_core.errors import InvalidRequest
from memory_core.models import pitfall_candidate_id
from memory_core.read.indexes import (
    ensure_fts,
    ensure_read_indexes,
    ensure_vector_index,
    refresh_indices,
)
from memory_core.recall import Recaller
from memory_core.stores.lance import LanceStore
from tests.recall_rows import T0, make_row, write_rows

NOW = datetime(2026, 8, 1, tzinfo=UTC)


@pytest.fixture
def lance(settings: Settings) -> LanceStore:
    store = LanceStore(settings.lance_uri)
    store.ensure_tables(384)
    return store


@pytest.fixture
def memory(settings: Settings, lance: LanceStore, embedder: HashEmbedder) -> Iterator[Recaller]:
    with Recaller.from_settings(settings, embedder=embedder, access_log=False) as reader:
        yield reader


def ids(result) -> list[str]:
    return [r["record_id"] for r in result.records]


def fact(embedder, fid, **kw):
    return make_row("facts", embedder, fid, **kw)


def test_scope_tenant_and_subject(lance, memory, embedder):
    write_rows(
        lance,
        "facts",
        [
            fact(embedder, "mine", text="vpn error 720: reset the adapter"),
            fact(embedder, "shared", subject_id=None, text="vpn error 720 is an adapter issue"),
            fact(embedder, "other-subject", subject_id="u2", text="vpn error 720 for u2"),
            fact(embedder, "other-tenant", tenant_id="globex", text="vpn error 720 at globex"),
        ],
    )
    got = memory.recall("vpn error 720", tenant_id="acme", subject_id="u1", now=NOW)
    assert sorted(ids(got)) == ["mine", "shared"]
    tenant_only = memory.recall("vpn error 720", tenant_id="acme", now=NOW)
    assert ids(tenant_only) == ["shared"]
    assert ids(memory.recall("vpn", tenant_id="nobody", subject_id="u1", now=NOW)) == []


def test_records_have_the_table_columns_score_and_reason(lance, memory, embedder):
    write_rows(lance, "facts", [fact(embedder, "f1", conditions={"os": "win11"})])
    (record,) = memory.recall("facts f1", tenant_id="acme", subject_id="u1", now=NOW).records
    assert "vector" not in record
    assert record["fact_id"] == "f1" and record["predicate"] == "prefers"
    assert record["conditions"] == {"os": "win11"}  # JSON columns come back as objects
    assert record["valid_from"] == "2026-07-01T00:00:00Z"
    assert isinstance(record["score"], float) and record["reason"].startswith("relevance")
    assert record["memory_type"] == "semantic" and record["table"] == "facts"


def _supersession(embedder, when: datetime) -> list[dict]:
    """Owner Jin, then (recorded ``when``) Mina since July 10: one correction, versioned rows."""
    jin = dict(predicate="owner", object="Jin", text="the owner is Jin")
    return [
        fact(embedder, "jin", **jin, recorded_to=when),
        fact(
            embedder,
            "jin-v2",
            **jin,
            status="superseded",
            valid_to=T0 + timedelta(days=9),
            recorded_at=when,
            superseded_by="mina",
        ),
        fact(
            embedder,
            "mina",
            predicate="owner",
            object="Mina",
            text="the owner is Mina",
            valid_from=T0 + timedelta(days=9),
            recorded_at=when,
            supersedes="jin",
        ),
    ]


def test_as_of_answers_for_the_valid_time_asked(lance, memory, embedder):
    learned = T0 + timedelta(days=15)
    write_rows(lance, "facts", _supersession(embedder, learned))
    ask = dict(tenant_id="acme", subject_id="u1", memory_type="semantic", now=NOW)
    assert ids(memory.recall("owner", **ask)) == ["mina"]
    assert ids(memory.recall("owner", as_of=T0 + timedelta(days=5), **ask)) == ["jin-v2"]
    assert ids(memory.recall("owner", as_of=T0 + timedelta(days=12), **ask)) == ["mina"]
    # what we believed on July 12 about July 12: Jin (the correction came on July 16)
    believed = memory.recall(
        "owner", as_of=T0 + timedelta(days=11), known_at=T0 + timedelta(days=11), **ask
    )
    assert ids(believed) == ["jin"]
    assert ids(memory.recall("owner", as_of=T0 - timedelta(days=1), **ask)) == []


@pytest.mark.parametrize("status", ["expired", "superseded", "revoked", "deleted", "compacted"])
def test_retired_statuses_are_never_served_for_the_present(lance, memory, embedder, status):
    write_rows(lance, "facts", [fact(embedder, "gone", status=status, text="vpn error 720")])
    assert ids(memory.recall("vpn error 720", tenant_id="acme", subject_id="u1", now=NOW)) == []
    stale = memory.recall(
        "vpn error 720", tenant_id="acme", subject_id="u1", now=NOW, include_stale=True
    )
    assert ids(stale) == []


def test_expiry_and_end_of_validity_are_filtered(lance, memory, embedder):
    write_rows(
        lance,
        "facts",
        [
            fact(embedder, "expired", expires_at=NOW - timedelta(seconds=1)),
            fact(embedder, "expiring", expires_at=NOW + timedelta(days=1)),
            fact(embedder, "ended", valid_to=NOW - timedelta(days=1)),
            fact(embedder, "future", valid_from=NOW + timedelta(days=1)),
        ],
    )
    assert ids(memory.recall("facts", tenant_id="acme", subject_id="u1", now=NOW)) == ["expiring"]


def test_contested_served_marked_and_stale_only_when_asked(lance, memory, embedder):
    write_rows(
        lance,
        "facts",
        [
            fact(embedder, "stale", status="stale", text="printer on floor 2"),
            fact(embedder, "contested", status="contested", text="printer on floor 3"),
        ],
    )
    ask = dict(tenant_id="acme", subject_id="u1", now=NOW)
    default = {r["record_id"]: r for r in memory.recall("printer floor", **ask)}
    assert list(default) == ["contested"] and default["contested"]["conflict"] is True
    got = {r["record_id"]: r for r in memory.recall("printer floor", include_stale=True, **ask)}
    assert got["contested"]["conflict"] is True and "contested" in got["contested"]["reason"]
    assert got["stale"]["score_components"]["stale"] == 1.0 and "stale" in got["stale"]["reason"]
    assert got["stale"]["stale"] is True and got["contested"]["stale"] is False


def test_two_served_objects_for_one_predicate_are_marked_as_a_conflict(lance, memory, embedder):
    write_rows(
        lance,
        "facts",
        [
            fact(embedder, "a", predicate="editor", object="vim", text="editor vim"),
            fact(embedder, "b", predicate="editor", object="emacs", text="editor emacs"),
        ],
    )
    got = memory.recall("editor", tenant_id="acme", subject_id="u1", now=NOW).records
    assert all(r["conflict"] for r in got)
    assert {r["record_id"]: r["conflict_with"] for r in got} == {"a": ["b"], "b": ["a"]}


def test_sensitivity_and_purpose(lance, memory, embedder):
    write_rows(
        lance,
        "facts",
        [
            fact(embedder, "high", sensitivity="high", text="salary band"),
            fact(embedder, "billing", purpose="billing", text="salary band billing"),
            fact(embedder, "any", text="salary band any purpose"),
        ],
    )
    ask = dict(tenant_id="acme", subject_id="u1", now=NOW)
    assert sorted(ids(memory.recall("salary", **ask))) == ["any", "billing"]
    assert sorted(ids(memory.recall("salary", purpose="support", **ask))) == ["any"]
    allowed = memory.recall("salary", sensitivity=["high"], **ask)
    assert ids(allowed) == ["high"]


def test_procedures_latest_version_whose_preconditions_hold(lance, memory, embedder):
    def proc(pid, version, pre, **kw):
        return make_row(
            "procedures",
            embedder,
            pid,
            name="fix-vpn",
            version=version,
            preconditions=pre,
            text=f"fix vpn error 720 v{version}",
            **kw,
        )

    write_rows(
        lance,
        "procedures",
        [
            proc("p1", "1.9", {"os": "win11"}),
            proc("p2", "1.10", {"os": "win11", "adapter": ["intel", "realtek"]}),
            proc("p0", "0.1", {}, status="superseded", valid_to=T0 + timedelta(days=1)),
            proc("unapproved", "9", {}, authority="agent_inference"),
        ],
    )
    ask = dict(tenant_id="acme", subject_id="u1", memory_type="procedural", now=NOW)
    got = memory.recall("fix vpn", state={"os": "win11", "adapter": "intel"}, **ask)
    assert ids(got) == ["p2"]
    reasons = {x["record_id"]: x["reason"] for x in got.query_record["left_out"]}
    assert reasons["p1"] == "older version 1.9 of fix-vpn"
    missing = memory.recall("fix vpn", state={"os": "win11"}, **ask)
    assert ids(missing) == []
    assert "adapter=intel|realtek (state: -)" in missing.query_record["left_out"][-1]["reason"]
    assert ids(memory.recall("fix vpn", state={"os": "macos", "adapter": "intel"}, **ask)) == []


def test_state_filters_facts_as_it_filters_procedures(lance, memory, embedder):
    """A fact true under conditions is left out when the caller's state contradicts them."""
    write_rows(
        lance,
        "facts",
        [
            make_row("facts", embedder, "f-win", text="vpn 720 fix", conditions={"os": "win11"}),
            make_row("facts", embedder, "f-mac", text="vpn 720 fix", conditions={"os": "macos"}),
            make_row("facts", embedder, "f-any", text="vpn 720 fix"),
            make_row("facts", embedder, "f-or", text="vpn 720", conditions={"os": ["win11", "x"]}),
        ],
    )
    ask = dict(tenant_id="acme", subject_id="u1", memory_type="semantic", now=NOW)
    got = memory.recall("vpn 720 fix", state={"os": "win11"}, **ask)
    assert sorted(ids(got)) == ["f-any", "f-or", "f-win"]
    reasons = {x["record_id"]: x["reason"] for x in got.query_record["left_out"]}
    assert reasons["f-mac"] == "condition contradicts state: os=macos (state: win11)"
    other_key = memory.recall("vpn 720 fix", state={"adapter": "intel"}, **ask)
    assert len(ids(other_key)) == 4  # a key the state does not name is no contradiction
    assert len(ids(memory.recall("vpn 720 fix", **ask))) == 4  # no state: no filter


def test_pitfalls_are_served_where_their_conditions_hold(lance, memory, embedder):
    """A failure lesson reaches an agent whose stated state matches it, with the procedure."""
    write_rows(
        lance,
        "procedures",
        [make_row("procedures", embedder, "p-cancel", subject_id=None, candidate_id="cand_p",
                  text="cancel reservation: cancel_reservation(reservation_id=$reservation_id)")],
    )  # fmt: skip
    write_rows(
        lance,
        "facts",
        [make_row("facts", embedder, "f-pit", subject_id=None, predicate="pitfall:cancel",
                  candidate_id=pitfall_candidate_id("acme", "it", "cand_p", "1"),
                  text="cancel reservation: cancel_reservation failed 4 of 4 times when "
                       "membership=basic", conditions={"membership": "basic"}),
         # ranks between them: without placement it would separate the warning from its steps
         fact(embedder, "f-mid", subject_id=None, text="cancel reservation cancel reservation")],
    )  # fmt: skip
    ask = dict(tenant_id="acme", subject_id="u1", now=NOW)
    basic = memory.recall("cancel reservation", state={"membership": "basic"}, **ask)
    assert sorted(ids(basic)) == ["f-mid", "f-pit", "p-cancel"]
    order = ids(basic)
    assert order.index("f-pit") == order.index("p-cancel") + 1  # right after its procedure
    [pit] = [r for r in basic.records if r["record_id"] == "f-pit"]
    assert pit["qualifies"] == "p-cancel"
    for state in ({"membership": "gold"}, {}):
        got = memory.recall("cancel reservation", state=state, **ask)
        assert sorted(ids(got)) == ["f-mid", "p-cancel"]
        [why] = [x["reason"] for x in got.query_record["left_out"] if x["record_id"] == "f-pit"]
        assert why.startswith("pitfall conditions not in state: membership=basic")


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
def test_empty_query_is_refused(memory, query):
    with pytest.raises(InvalidRequest, match="query: is empty"):
        memory.recall(query, tenant_id="acme", now=NOW)
    with pytest.raises(ValueError, match="tenant_id: is empty"):  # still a ValueError too
        memory.recall("vpn", tenant_id=" ", now=NOW)


def test_full_text_leg_finds_an_exact_identifier(lance, memory, embedder):
    rng = np.random.default_rng(3)
    rows = []
    for i in range(30):
        vec = rng.standard_normal(384).astype(np.float32)
        rows.append(
            fact(
                embedder,
                f"f{i}",
                text=f"note {i} about printers and queues",
                vector=(vec / np.linalg.norm(vec)).tolist(),
            )
        )
    rows[17]["text"] = "the sync job fails with ERR_7781 after the token rotates"
    write_rows(lance, "facts", rows)
    ask = dict(tenant_id="acme", subject_id="u1", memory_type="semantic", now=NOW, k=3)
    before = memory.recall("ERR_7781", **ask)
    assert before.query_record["tables"]["facts"]["text_hits"] is None  # no index yet
    assert ensure_fts(lance.table("facts")) is True
    assert ensure_fts(lance.table("facts")) is False  # idempotent
    memory._indices.clear()  # the reader trusts its index list for a few seconds
    after = memory.recall("ERR_7781", **ask)
    assert ids(after)[0] == "f17"
    assert "text #1" in after.records[0]["reason"]


def test_entity_match_lifts_the_record_whose_key_fields_name_the_term(lance, memory, embedder):
    same = embedder.embed(["default browser"])[0].tolist()
    write_rows(
        lance,
        "facts",
        [
            fact(embedder, "z", predicate="default_browser", object="firefox", vector=same),
            fact(embedder, "b", predicate="default_shell", object="zsh", vector=same),
        ],
    )
    got = memory.recall("firefox", tenant_id="acme", subject_id="u1", now=NOW)
    assert ids(got) == ["z", "b"]  # the vector tie alone would put "b" first
    assert "matches firefox" in got.records[0]["reason"]
    assert got.records[0]["score_components"]["entity"] == 1.0


def test_token_budget_and_k_pack_greedily_with_reasons(lance, memory, embedder):
    write_rows(
        lance,
        "facts",
        [
            fact(embedder, "long", text="vpn " + "x" * 400, importance=1.0),
            fact(embedder, "short1", text="vpn tip one"),
            fact(embedder, "short2", text="vpn tip two"),
        ],
    )
    ask = dict(tenant_id="acme", subject_id="u1", now=NOW)
    got = memory.recall("vpn", budget_tokens=20, **ask)
    assert sorted(ids(got)) == ["short1", "short2"]
    assert got.query_record["used_tokens"] <= 20
    (left,) = got.query_record["left_out"]
    assert left["record_id"] == "long" and left["reason"].startswith("over token budget")
    top1 = memory.recall("vpn", k=1, **ask)
    assert len(top1) == 1
    assert sum("below the top 1" in x["reason"] for x in top1.query_record["left_out"]) == 2
    assert set(top1.query_record["selected"]) == set(ids(top1))
    assert len(top1.query_record["candidates"]) == 3


def test_explain_names_the_filter_that_kept_each_near_miss_out(lance, memory, embedder):
    write_rows(
        lance,
        "facts",
        [
            fact(embedder, "ok", text="dns cache flush"),
            fact(embedder, "old", status="superseded", text="dns cache flush old"),
            fact(embedder, "secret", sensitivity="high", text="dns cache flush secret"),
            fact(embedder, "u2s", subject_id="u2", text="dns cache flush u2"),
        ],
    )
    got = memory.recall("dns cache", tenant_id="acme", subject_id="u1", now=NOW, explain=True)
    reasons = {x["record_id"]: x["reason"] for x in got.query_record["left_out"]}
    assert reasons == {
        "old": "filter: status superseded",
        "secret": "filter: sensitivity high not allowed",
    }  # other subjects' records never enter the explanation


def test_episodes_and_digests_are_the_episodic_class(lance, memory, embedder):
    write_rows(lance, "episodes", [make_row("episodes", embedder, "e1", text="vpn 720 fixed")])
    write_rows(lance, "digests", [make_row("digests", embedder, "d1", text="vpn 720 digest")])
    write_rows(lance, "facts", [fact(embedder, "f1", text="vpn 720 fact")])
    got = memory.recall("vpn 720", tenant_id="acme", subject_id="u1", memory_type="episodic")
    assert sorted(ids(got)) == ["d1", "e1"]
    assert {r["memory_type"] for r in got.records} == {"episodic"}


def test_several_classes_are_ranked_and_packed_together(lance, memory, embedder):
    write_rows(lance, "episodes", [make_row("episodes", embedder, "e1", text="vpn 720 fixed")])
    evidence = json.dumps([{"source_id": "e1", "source_kind": "episode"}])
    write_rows(lance, "facts", [fact(embedder, "f1", text="vpn 720 fact", provenance=evidence)])
    write_rows(lance, "procedures", [make_row("procedures", embedder, "p1", text="vpn 720 fix")])
    got = memory.recall(
        "vpn 720", tenant_id="acme", subject_id="u1", memory_type=["semantic", "episodic"]
    )
    assert got.query_record["memory_types"] == ["episodic", "semantic"]
    assert {r["table"] for r in got.records} <= {"episodes", "facts"}
    # one packing over both classes: the fact and the turn it rests on are one statement
    assert len({"e1", "f1"} & set(ids(got))) == 1
    left = {x["record_id"]: x["reason"] for x in got.query_record["left_out"]}
    assert left.get("e1", left.get("f1", "")).startswith("covered by")


def test_vector_index_is_built_once_and_only_when_big_enough(lance, memory, embedder):
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((300, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    write_rows(
        lance,
        "facts",
        [fact(embedder, f"f{i}", vector=vecs[i].tolist()) for i in range(300)],
    )
    table = lance.table("facts")
    ask = dict(tenant_id="acme", subject_id="u1", memory_type="semantic", k=5, now=NOW)
    exact = ids(memory.recall("facts", **ask))
    assert ensure_vector_index(table, 1000) == "too small"
    assert ensure_vector_index(table, 100, partitions=4) == "ivf_flat"
    assert ensure_vector_index(table, 100, partitions=4) == "exists"
    memory._indices.clear()
    got = memory.recall("facts", **ask)
    assert got.query_record["tables"]["facts"]["vector_index"] is True
    assert ids(got) == exact  # the scoped search stays exact: the index is not probed
    summary = ensure_read_indexes(lance, vector_min_rows=100)
    assert summary["facts"]["indices"]["vector"] == "IvfFlat"
    assert summary["episodes"]["vector_index"] == "too small"


def test_refresh_indices_folds_new_rows_into_every_index(lance, embedder):
    write_rows(lance, "facts", [fact(embedder, "f1")])
    table = lance.table("facts")
    ensure_fts(table)
    write_rows(lance, "facts", [fact(embedder, "f2"), fact(embedder, "f3")])
    unindexed = {ix.name: ix.num_unindexed_rows for ix in table.list_indices()}
    assert unindexed["text_idx"] == 2 and unindexed["tenant_id_idx"] == 3
    refresh_indices(table)
    assert {ix.num_unindexed_rows for ix in table.list_indices()} == {0}
