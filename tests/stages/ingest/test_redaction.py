"""The write gate: no secret reaches any Lance table, DuckDB table, file under the home, or log."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from memory_core.stages.ingest.redact import redact_text
from memory_core.stores.schemas import TABLES
from tests.conftest import episode, lines_of

SECRETS = {
    "anthropic_key": "sk-ant-api03-Zx8Qw2Er4Ty6Ui8Op0As2Df4Gh6Jk8Lz0Xc2Vb4Nm6",
    "aws_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "bearer": "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq98sQw\nq1w2e3r4t5y6u7i8o9p0\n-----END RSA PRIVATE KEY-----",
    "url_password": "S3cretPassw0rd!",
    "card": "4111 1111 1111 1111",
}
CONTEXT = {
    "url_password": "connect with postgres://admin:S3cretPassw0rd!@db.internal:5432/app",
}


def _leaks(secret: str) -> str:
    """The part of a secret that must never be stored (a bearer's scheme word may stay)."""
    return secret.split(" ", 1)[1] if secret.startswith("Bearer ") else secret


def _all_lance_text(stores) -> str:
    chunks = []
    for name in TABLES:
        chunks.append(json.dumps(stores.lance.scan(name).drop(["vector"]).to_pylist(), default=str))
    return "\n".join(chunks)


def _all_duckdb_text(stores) -> str:
    chunks = []
    with stores.meta.connect() as con:
        tables = [
            r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        ]
        for table in tables:
            chunks.append(json.dumps(con.execute(f"SELECT * FROM {table}").fetchall(), default=str))
    return "\n".join(chunks)


def _all_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())


@pytest.mark.parametrize("kind", list(SECRETS))
@pytest.mark.parametrize(
    "field", ["text", "observations", "actions", "conditions", "feedback", "claims"]
)
def test_secret_is_stored_nowhere(kind, field, ingest, stores, settings, caplog):
    caplog.set_level(logging.DEBUG)
    secret = SECRETS[kind]
    carrier = CONTEXT.get(kind, f"the value was {secret} in the log")
    value = {
        "text": carrier,
        "observations": ["ok", carrier],
        "actions": ["run", carrier],
        "conditions": {"error": carrier},
        "feedback": carrier,
        "claims": [{"predicate": "token", "object": carrier, "span": carrier}],
    }[field]
    good = episode(episode_id="g1", source_role="user", **{field: value})
    bad = episode(
        episode_id="b1", outcome="nope", text=carrier
    )  # quarantined, must be redacted too
    result = ingest(lines_of(good, bad), quarantine=True)
    assert result.inserted == 1 and result.quarantined == 1
    assert sum(result.redactions.values()) >= 1
    needle = _leaks(secret)
    assert needle not in _all_lance_text(stores)
    assert needle not in _all_duckdb_text(stores)
    assert needle.encode() not in _all_bytes(settings.home)
    assert needle not in caplog.text
    with stores.meta.connect() as con:
        actions = {r[0] for r in con.execute("SELECT action FROM audit_log").fetchall()}
    assert "redact" in actions


def test_luhn_invalid_numbers_and_plain_text_are_left_alone():
    text = "order 4111 1111 1111 1112 shipped at 2026-07-01 12:00, ticket 1234567890123"
    assert redact_text(text) == text


def test_redaction_keeps_surrounding_text():
    out = redact_text("use postgres://admin:hunter2hunter2@db:5432/x please")
    assert out == "use postgres://admin:[REDACTED:url_password]@db:5432/x please"


def test_card_at_end_of_sentence_is_redacted():
    assert (
        redact_text("charge my card 5500 5076 9041 8387.")
        == "charge my card [REDACTED:card_number]."
    )


def test_demo_secrets_are_all_redacted(ingest, stores):
    from memory_core.demo import generate_demo

    data = generate_demo(seed=3)
    ids = {s["episode_id"] for s in data.truth["secrets"]}
    lines = [json.dumps(e) for e in data.episodes if e["episode_id"] in ids]
    ingest(lines)
    stored = _all_lance_text(stores) + _all_duckdb_text(stores)
    for secret in data.truth["secrets"]:
        assert secret["needle"] not in stored, secret["kind"]
