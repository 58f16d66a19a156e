"""Issue 18: a tenant-scope record served to one user never names the other supporting users.

Stored provenance keeps every source's subject (forgetting walks it); what recall and
``memctl facts|procedures`` serve carries the source ids, hashes and a subject count only.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from typer.testing import CliRunner

from memory_core.cli import app
from memory_core.config import Settings
from memory_core.embed import HashEmbedder
from memory_core.recall import Recaller
from memory_core.stores.lance import LanceStore
from tests.recall_rows import make_row, write_rows

NOW = datetime(2026, 8, 1, tzinfo=UTC)
OTHERS = ["maria.lopez", "tariq.costa", "lena.okafor"]


def _provenance(subjects: list[str]) -> str:
    return json.dumps(
        [
            {
                "source_id": f"ep{i}",
                "source_kind": "episode",
                "content_hash": f"h{i}",
                "subject_id": s,
            }
            for i, s in enumerate([*subjects, subjects[0]])
        ]
    )


def _rows(embedder: HashEmbedder) -> dict[str, list[dict]]:
    store_rows = {
        "facts": [
            make_row(
                "facts",
                embedder,
                "tenant-fact",
                subject_id=None,
                text="vpn error 720 is an adapter mismatch",
                provenance=_provenance(OTHERS),
            ),
            make_row(
                "facts",
                embedder,
                "own-fact",
                subject_id="u1",
                text="u1 prefers vpn over wifi",
                provenance=_provenance(["u1"]),
            ),
        ],
        "procedures": [
            make_row(
                "procedures",
                embedder,
                "proc-720",
                subject_id=None,
                text="vpn error 720: reset network adapter",
                provenance=_provenance(OTHERS),
            ),
        ],
    }
    return store_rows


def test_recall_and_listings_serve_a_count_not_the_other_subjects(settings: Settings) -> None:
    embedder = HashEmbedder(384)
    lance = LanceStore(settings.lance_uri)
    lance.ensure_tables(384)
    for table, rows in _rows(embedder).items():
        write_rows(lance, table, rows)
    with Recaller.from_settings(settings, embedder=embedder, access_log=False) as reader:
        got = reader.recall("vpn error 720", tenant_id="acme", subject_id="u1", now=NOW)
    served = {r["record_id"]: r for r in got.records}
    assert {"tenant-fact", "proc-720", "own-fact"} <= set(served)
    for rid in ("tenant-fact", "proc-720"):
        text = json.dumps(served[rid])
        assert not any(s in text for s in OTHERS), rid
        assert served[rid]["supporting_subjects"] == 3
        assert [p["source_id"] for p in served[rid]["provenance"]] == ["ep0", "ep1", "ep2", "ep3"]
    assert served["own-fact"]["provenance"][0]["subject_id"] == "u1"  # the user's own

    runner = CliRunner()
    for command in ("facts", "procedures"):
        out = runner.invoke(
            app, [command, "--tenant", "acme", "--home", str(settings.home), "--format", "json"]
        )
        assert out.exit_code == 0, out.output
        rows = json.loads(out.stdout)
        tenant_rows = [r for r in rows if r["subject_id"] is None]
        assert tenant_rows and not any(s in out.stdout for s in OTHERS)
        assert all(r["supporting_subjects"] == 3 for r in tenant_rows)
    # the store itself keeps the lineage forgetting needs
    stored = lance.scan("facts", where="fact_id = 'tenant-fact'", columns=["provenance"])
    assert OTHERS[0] in stored.column("provenance")[0].as_py()
