"""The independent scans find what is there (so a 0 from them means something), and the
planter and the write gate together leave no planted secret stored."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from memory_core.config import Settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.eval.plant import plant_secrets
from memory_core.eval.scans import _pattern, scan_for_needles, subject_residue
from memory_core.stages.forget import forget_subject
from memory_core.stores import Stores
from tests.conftest import episode, lines_of

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)


def _episodes() -> list[dict]:
    return [
        episode(episode_id="a:1", subject_id="ana", text="Ana's distinctive long text about VPN"),
        episode(episode_id="a:10", subject_id="ben", text="Ben's own words on the printer jam"),
        episode(episode_id="x:1", tenant_id="other", subject_id="ana", text="Other tenant Ana"),
    ]


def test_pattern_matches_literals_only() -> None:
    """RE2 (Arrow and DuckDB) reads the pattern; regex characters in needles are literal."""
    pattern = _pattern(["a.b", "x y", "q+", 'é"'])
    texts = pa.array(["za.bz", "azb", "x y", "qq", 'café"', "q+"])
    assert pc.match_substring_regex(texts, pattern).to_pylist() == [
        True, False, True, False, True, True,
    ]  # fmt: skip


def test_needles_found_in_lance_and_duckdb(
    stores: Stores, ingest: Callable, embedder: HashEmbedder
) -> None:
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    ingest(lines_of(*_episodes()))
    with stores.meta.transaction() as con:
        con.execute("CREATE TABLE scratch (note VARCHAR, n INTEGER)")
        con.execute("INSERT INTO scratch VALUES ('left: printer jam', 1), ('clean', 2)")
    found = scan_for_needles(stores, ["printer jam"])
    assert found.hits.get("duckdb.scratch") == 1
    assert any(k.startswith("lance.episodes@v") for k in found.hits)
    assert scan_for_needles(stores, ["never-stored-needle"]).total == 0


def test_subject_residue_before_and_after_forget(
    stores: Stores, settings: Settings, ingest: Callable, embedder: HashEmbedder
) -> None:
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    ingest(lines_of(*_episodes()))
    args = {
        "tenant_id": "acme",
        "subject_id": "ana",
        "episode_ids": ["a:1"],
        "texts": ["Ana's distinctive long text about VPN"],
    }
    before = subject_residue(stores, **args)
    assert before.total > 0  # the scan sees the subject while it is there
    forget_subject(
        stores, settings, RunContext(now=NOW), "ana", tenant_id="acme", embedder=embedder
    )
    after = subject_residue(stores, **args)
    assert after.total == 0, after.hits
    # "a:1" quoted does not match "a:10"; the other tenant's Ana stays
    assert stores.lance.count("episodes", "episode_id = 'a:10'") == 1
    assert stores.lance.count("episodes", "tenant_id = 'other' AND subject_id = 'ana'") == 1


def test_planted_secrets_are_deterministic_and_not_stored(
    stores: Stores, ingest: Callable, embedder: HashEmbedder
) -> None:
    eps = [episode(episode_id=f"e{i:02d}", text=f"turn {i}") for i in range(12)]
    planted_eps, planted = plant_secrets(eps, every=4, seed=3)
    again, planted_again = plant_secrets(eps, every=4, seed=3)
    assert planted == planted_again and planted_eps == again
    assert [p.episode_id for p in planted] == ["e00", "e04", "e08"]
    assert all(
        p.needle in e["text"]
        for p in planted
        for e in planted_eps
        if e["episode_id"] == p.episode_id
    )
    assert eps[0]["text"] == "turn 0"  # the input is not modified
    stores.lance.ensure_tables(embedder.dim, embedder=embedder.version)
    ingest(lines_of(*planted_eps))
    assert scan_for_needles(stores, [p.needle for p in planted]).total == 0
