"""Object storage: Lance tables on an S3-compatible server (moto, on loopback), DuckDB local.

The whole nightly path runs against it: init the tables, ingest, the nightly flow through
Prefect, recall, then the forgetting flow (deletes, compaction planned centrally and
committed, version cleanup on the bucket). Nothing is written under the home's lance/.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest

from flows.forgetting import run_forgetting_flow
from flows.nightly import run_nightly
from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.recall import recall
from memory_core.stages.ingest import ingest_records
from memory_core.stores import open_stores
from memory_core.stores.candidates import list_candidates
from tests.conftest import episode

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")

NOW = datetime(2026, 8, 1, tzinfo=UTC)
BUCKET = "agent-memory"
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture(scope="module")
def s3_endpoint():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per S3 request
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **KEYS)
    client.create_bucket(Bucket=BUCKET)
    yield endpoint, client
    server.stop()


def _episodes() -> list[str]:
    out = []
    for i, subject in enumerate(["ana", "ben", "cho", "dev"]):
        out.append(
            episode(
                episode_id=f"ok{i}",
                subject_id=subject,
                conditions={"error_code": "720", "adapter_mismatch": "true"},
                occurred_at=f"2026-07-0{i + 1}T10:00:00Z",
            )
        )
    out.append(
        episode(
            episode_id="fail0",
            subject_id="eve",
            outcome="failure",
            conditions={"error_code": "720", "adapter_mismatch": "false"},
            occurred_at="2026-07-30T10:00:00Z",
            text="Reset the adapter, VPN still fails with 720.",
        )
    )
    return [json.dumps(e) for e in out]


def test_nightly_on_s3(tmp_path, s3_endpoint):
    endpoint, client = s3_endpoint
    settings = load_settings(
        home=tmp_path / "home",
        embed={"model": "hash"},
        stores={
            "lance_uri": f"s3://{BUCKET}/memory",
            "storage_options": {
                "endpoint": endpoint,
                "region": "us-east-1",
                "allow_http": "true",
                **KEYS,
            },
        },
    )
    stores = open_stores(settings)
    assert stores.lance.ensure_tables(384)
    result = ingest_records(
        stores, settings, RunContext(now=NOW), _episodes(), embedder=HashEmbedder(384)
    )
    assert result.inserted == 5

    summary = run_nightly(settings, now=NOW)
    assert summary["partitions"] == 1 and summary["skipped"] == 0
    procedural = [c for c in list_candidates(stores.meta) if c.kind.value == "procedural"]
    assert procedural and procedural[0].support_ids == ["ok0", "ok1", "ok2", "ok3"]

    hits = recall(
        "VPN error 720 adapter",
        tenant_id="acme",
        subject_id="ana",
        now=NOW,
        settings=settings,
        access_log_dir=None,
    )
    assert "ok0" in {r["record_id"] for r in hits.records}

    # forgetting on the bucket: the older episodes pass the TTL, are deleted, and the
    # rewrite/cleanup leaves no object of an old version behind
    receipt = run_forgetting_flow(settings, now=NOW + timedelta(days=20))
    assert "episodes" in receipt["changed_tables"]
    assert receipt["lance_compaction"]["episodes"]["tasks"] >= 1
    assert stores.lance.count("episodes", "episode_id = 'ok0'") == 0
    assert stores.lance.count("episodes", "episode_id = 'fail0'") == 1

    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for o in page.get("Contents", [])
    ]
    assert any(k.startswith("memory/episodes.lance/") for k in keys)
    assert not (tmp_path / "home" / "lance").exists()
    assert (tmp_path / "home" / "meta.duckdb").exists()
