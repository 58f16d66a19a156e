"""The fast ingest path must be invisible: same rows, errors and hashes as the exact path.

The exact path validates every whole line with pydantic (forced here by making the vector cut
refuse every line); the fast path cuts the vector out, parses all vectors of a chunk at once
and screens secrets with literals first. Also: the hash and JSON columns are byte-for-byte
what ingest stored before (a copy of the previous gate is the reference), and streaming
keeps line numbers across chunks.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

from memory_core.config import load_settings
from memory_core.context import RunContext
from memory_core.embed import HashEmbedder
from memory_core.errors import EpisodeConflict, ValidationFailed
from memory_core.models import Authority, Episode, SourceRole, canonical_json, content_hash
from memory_core.stages.ingest import blocks as ingest_fast
from memory_core.stages.ingest import ingest_file, ingest_records
from memory_core.stages.ingest import stage as ingest_stage
from memory_core.stages.ingest.blocks import VectorParser, process_chunk, split_vector
from memory_core.stages.ingest.redact import _SCREEN, Redactor, might_hold_secret, redact_text
from memory_core.stores import open_stores
from tests.conftest import NOW, episode
from tests.stages.ingest.test_redaction import CONTEXT, SECRETS

DIM = 384


# --- inputs -------------------------------------------------------------------------------


def _vector(rng: random.Random, style: str) -> list[Any]:
    values = np.random.default_rng(rng.randrange(1 << 30)).standard_normal(DIM)
    if style == "round6":
        return [round(float(v), 6) for v in values]
    if style == "repr":
        return [float(v) for v in values]
    if style == "ints":
        return [int(v * 3) for v in values]
    if style == "edge":
        out: list[Any] = [float(v) for v in values]
        out[:7] = [
            0,
            -0.0,
            1e-45,
            3.4e38,
            -3.4e38,
            123456789012345678901234567890,
            2**60 + 2**36 + 1,
        ]
        return out
    msg = style
    raise ValueError(msg)


def _number(value: Any, rng: random.Random) -> str:
    if isinstance(value, int):
        return str(value) if value else rng.choice(["0", "-0"])
    return rng.choice([repr(value), f"{value:.17e}", f"{value:.9E}", f"{value:.17g}"])


def _line(record: dict[str, Any], rng: random.Random) -> str:
    """One JSON line in one of many spellings: vector first, last or between, odd spacing."""
    record = dict(record)
    vector = record.pop("vector", None)
    sep = rng.choice([(", ", ": "), (",", ":"), (" ,\t", " :  ")])
    body = json.dumps(record, separators=sep, ensure_ascii=rng.random() < 0.5)
    if vector is None:
        return body
    numbers = rng.choice([", ", ",", " , "]).join(_number(v, rng) for v in vector)
    colon = rng.choice([":", ": ", " :\t"])
    member = '"vector"' + colon + "[" + rng.choice(["", " "]) + numbers + "]"
    where = rng.choice(["first", "last", "middle"])
    if where == "first":
        return "{" + member + sep[0] + body[1:]
    if where == "last":
        return body[:-1] + sep[0] + member + rng.choice(["}", " }", "}  "])
    cut = body.index(sep[0] + '"subject_id"')
    return body[:cut] + sep[0] + member + body[cut:]


def _records(
    n: int, seed: int, styles: tuple[str, ...] = ("round6", "round6", "repr", "ints", "edge")
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    secrets = [
        CONTEXT.get(kind, f"the value was {secret} in the log") for kind, secret in SECRETS.items()
    ]
    out = []
    for i in range(n):
        rec = episode(
            episode_id=f"ep-{i}",
            subject_id=f"u{i % 7}",
            source_role=rng.choice(["user", "agent", "tool", "system"]),
            occurred_at=rng.choice(
                ["2026-07-01T10:00:00Z", "2026-07-01T12:00:00.123+02:00", "2026-06-30T23:59:59Z"]
            ),
            text=rng.choice(
                [
                    "Reset the adapter and the VPN came back.",
                    'He said "vector": [1, 2] twice, and {braces} too',
                    "caf\u00e9 \u2013 na\u00efve \U0001f600 \\ backslash",
                    "line one\nline two\ttab",
                    None,
                ]
            ),
        )
        if rng.random() < 0.3:
            field = rng.choice(["text", "goal", "feedback", "actions", "observations", "conds"])
            secret = rng.choice(secrets)
            if field in {"actions", "observations"}:
                rec[field] = ["ok", secret]
            elif field == "conds":
                rec["conditions"] = {"error": secret, "os": "win11"}
            else:
                rec[field] = secret
        if rng.random() < 0.3:
            rec["claims"] = [
                {"predicate": "editor", "object": rng.choice(["vim", secrets[0]])},
                {"predicate": "shell", "object": "zsh", "span": "I use zsh"},
            ]
        if rng.random() < 0.2:
            rec["sources"] = [{"source_id": "kb/vpn", "revision": "3"}]
        if rng.random() < 0.2:
            rec["recorded_at"] = "2026-07-02T01:02:03.456789-05:00"
        if rng.random() < 0.2:
            rec["expires_at"] = "2027-01-01T00:00:00Z"
        if rng.random() < 0.8:
            rec["vector"] = _vector(rng, rng.choice(styles))
        out.append(rec)
    return out


def _mixed_lines(n: int, seed: int, **kw: Any) -> list[str]:
    rng = random.Random(seed)
    lines = [_line(r, rng) for r in _records(n, seed, **kw)]
    lines.insert(5, lines[3])  # an identical duplicate is stored once
    lines.insert(9, "   ")  # blank lines are skipped but keep the numbering
    return lines


def _store(tmp_path: Path, name: str):
    settings = load_settings(home=tmp_path / name)
    return settings, open_stores(settings)


def _ingest(tmp_path: Path, name: str, lines: list[str], **kw: Any):
    settings, stores = _store(tmp_path, name)
    result = ingest_records(
        stores, settings, RunContext(now=NOW), lines, embedder=HashEmbedder(DIM), **kw
    )
    return result, stores


def _rows(stores) -> list[dict[str, Any]]:
    rows = stores.lance.scan("episodes").to_pylist()
    return sorted(rows, key=lambda r: r["episode_id"])


class _ExactOnly:
    """Forces the exact path (the cut refuses every line) and counts the lines it takes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lines = 0
        exact_line = ingest_fast.exact_line

        def counted(*args: Any) -> Any:
            self.lines += 1
            return exact_line(*args)

        monkeypatch.setattr(ingest_fast, "cut_vector", lambda buf, start, end: None)
        monkeypatch.setattr(ingest_fast, "exact_line", counted)


# --- fast == exact ------------------------------------------------------------------------


def test_fast_and_exact_paths_store_the_same_rows(tmp_path, monkeypatch):
    lines = _mixed_lines(400, seed=1)
    fast_result, fast_stores = _ingest(tmp_path, "fast", lines)
    with monkeypatch.context() as m:
        exact = _ExactOnly(m)
        exact_result, exact_stores = _ingest(tmp_path, "exact", lines)
    assert exact.lines == len(lines) - 1  # every non-blank line
    fast_rows, exact_rows = _rows(fast_stores), _rows(exact_stores)
    assert len(fast_rows) == 400
    assert fast_rows == exact_rows
    assert fast_result.as_dict() == exact_result.as_dict()
    assert fast_result.redactions and fast_result.claims_without_authority
    assert 0 < fast_result.pending_embedding < 400  # lines without a vector: left to embed


def test_well_formed_lines_take_the_fast_path():
    lines = _mixed_lines(200, seed=2, styles=("round6", "repr", "ints"))
    with VectorParser(DIM) as parser:
        chunk = process_chunk(lines, 1, dim=DIM, now=NOW, parser=parser)
        assert not chunk.errors
        assert chunk.exact == 0
        assert chunk.has_vector.sum() > 100
        # a number beyond float range (inf once cast) is left to the exact path
        edge = _mixed_lines(50, seed=2, styles=("edge",))
        chunk = process_chunk(edge, 1, dim=DIM, now=NOW, parser=parser)
    assert not chunk.errors
    assert chunk.exact == chunk.has_vector.sum() > 0


def test_bad_lines_get_the_same_errors_on_both_paths(tmp_path, monkeypatch):
    good = episode(episode_id="g", vector=[0.5] * DIM)
    numbers = ", ".join(["0.1"] * DIM)
    base = json.dumps(episode(episode_id="b"))[:-1]
    bad = [
        base + ', "vector": [' + numbers.replace("0.1", '"x"', 1) + "]}",  # vector[0]
        base + ', "vector": [' + ", ".join(["0.1"] * (DIM - 1)) + "]}",  # 383 dimensions
        base + ', "vector": [' + numbers + ",]}",  # trailing comma
        base + ', "vector": [' + numbers.replace("0.1", "NaN", 1) + "]}",  # NaN
        base + ', "vector": [' + numbers.replace("0.1", ".5", 1) + "]}",  # not a JSON number
        base + ', "vector": [' + numbers.replace("0.1", "true", 1) + "]}",  # lax: 1.0, fine
        base + ', "vector": [' + numbers + "], }",  # trailing comma in the object
        base + ', "vector": [' + numbers + '], "colour": 1}',  # unknown field after it
        base.replace('"outcome": "success"', '"outcome": "meh"') + ', "vector": [' + numbers + "]}",
        base + ', "vector": [' + numbers + '], "vector": [1]}',  # a second vector key
        json.dumps(episode(episode_id="b", conditions={"vector": [0.1, 0.2]})),
        '{"vector": [' + numbers + "]}",  # nothing else
        '{"vector": [' + numbers + "], }",
        base + ', "vector": [' + numbers + "]",  # not closed
        base + ', "vector": null}',  # fine: embedded
        base + ', "vector": "[1, 2]"}',
        base + ', "vector": [' + numbers.replace("0.1", "Infinity", 1) + "]}",  # not finite
        base + ', "vector": [' + numbers.replace("0.1", "-Infinity", 1) + "]}",
        base + ', "vector": [' + numbers.replace("0.1", "1e39", 1) + "]}",  # beyond float32
        base + ', "vector": [' + ", ".join(["0"] * DIM) + "]}",  # all zero: no direction
        base + ', "vector": [' + ", ".join(["0.0"] * DIM) + "]}",
        base.replace('"subject_id": "', '"subject_id": "\\u0000', 1) + "}",  # NUL in an id
        base.replace('"tenant_id": "', '"tenant_id": "\\u001b', 1) + "}",  # an escape
        base + ', "session_id": "s\\u0085"}',  # a C1 control character
    ]
    lines = []
    for i, line in enumerate(bad):
        lines += [json.dumps({**good, "episode_id": f"g{i}"}), line.replace('"b"', f'"b{i}"', 1)]
    with pytest.raises(ValidationFailed) as fast:
        _ingest(tmp_path, "fast", lines)
    with monkeypatch.context() as m:
        forced = _ExactOnly(m)
        with pytest.raises(ValidationFailed) as exact:
            _ingest(tmp_path, "exact", lines)
    assert forced.lines == len(lines)
    assert fast.value.errors == exact.value.errors
    by_line = {e.line: e for e in fast.value.errors}
    assert by_line[2].field == "vector[0]"
    assert by_line[4].field == "vector" and "383 dimensions" in by_line[4].reason
    assert "not valid JSON" in by_line[6].reason
    assert by_line[8].field == "vector" and "NaN" in by_line[8].reason
    assert 12 not in by_line and 30 not in by_line  # true -> 1.0 and "vector": null are valid
    assert by_line[22].field == "conditions.vector"
    assert by_line[34].field == "vector" and "Infinity" in by_line[34].reason
    assert by_line[36].field == "vector" and "-Infinity" in by_line[36].reason
    assert by_line[38].field == "vector" and "overflows float32" in by_line[38].reason
    assert by_line[40].field == by_line[42].field == "vector"
    assert "all zeros" in by_line[40].reason and "all zeros" in by_line[42].reason
    assert by_line[44].field == "subject_id" and "U+0000" in by_line[44].reason
    assert by_line[46].field == "tenant_id" and "U+001B" in by_line[46].reason
    assert by_line[48].field == "session_id" and "U+0085" in by_line[48].reason
    assert {e.line for e in fast.value.errors} == {2 * i + 2 for i in range(len(bad))} - {12, 30}


def test_quarantine_is_the_same_on_both_paths(tmp_path, monkeypatch):
    lines = _mixed_lines(60, seed=3)
    lines[10] = lines[10].replace('"outcome"', '"outcome": "meh", "x"', 1)
    lines[20] = lines[20][:-3]
    fast_result, fast_stores = _ingest(tmp_path, "fast", lines, quarantine=True)
    with monkeypatch.context() as m:
        forced = _ExactOnly(m)
        exact_result, exact_stores = _ingest(tmp_path, "exact", lines, quarantine=True)
    assert forced.lines == len(lines) - 1
    assert fast_result.as_dict() == exact_result.as_dict()
    assert fast_result.quarantined == 2
    assert _rows(fast_stores) == _rows(exact_stores)
    query = "SELECT line_no, episode_id, errors, raw FROM quarantine ORDER BY line_no"
    with fast_stores.meta.connect() as a, exact_stores.meta.connect() as b:
        assert a.execute(query).fetchall() == b.execute(query).fetchall()


# --- hashes and JSON columns as before ----------------------------------------------------


def _legacy_row(episode_: Episode, counts: Counter[str]) -> dict[str, Any]:
    """The gate and hash of ingest before the fast path (copied), as the reference."""
    redactor = Redactor()
    redactor.counts = counts
    data = episode_.model_dump(mode="json", exclude={"vector"})
    texts = [
        data.get("goal") or "",
        data.get("text") or "",
        data.get("feedback") or "",
        *data["actions"],
        *data["observations"],
        *data["conditions"].values(),
        *(c["object"] + " " + (c.get("span") or "") for c in data["claims"]),
    ]
    before = sum(redactor.counts.values())
    if any(_SCREEN.search(t) for t in texts if t):
        for key in ("goal", "text", "feedback", "actions", "observations", "conditions", "claims"):
            data[key] = redactor.value(data[key])
    redactions = sum(redactor.counts.values()) - before
    role = SourceRole(data["source_role"])
    no_authority = role in {SourceRole.tool, SourceRole.agent}
    authority = (Authority.none if no_authority else Authority.of_role(role)).value
    for claim in data["claims"]:
        claim["authority"] = authority
        claim["kind"] = "observation" if no_authority else "statement"
    content = {k: v for k, v in data.items() if k != "recorded_at"}
    return {
        "content_hash": content_hash(content),
        "conditions": canonical_json(data["conditions"]),
        "claims": canonical_json(data["claims"]),
        "sources": canonical_json(data["sources"]),
        "redactions": redactions,
        **{k: data[k] for k in ("goal", "text", "feedback", "actions", "observations")},
    }


def test_hashes_and_json_columns_are_what_ingest_stored_before(ingest, stores):
    records = _records(300, seed=4)
    rng = random.Random(4)
    lines = [_line(r, rng) for r in records]
    result = ingest(lines)
    counts: Counter[str] = Counter()
    expected = {r["episode_id"]: _legacy_row(Episode.model_validate(r), counts) for r in records}
    columns = ["episode_id", *next(iter(expected.values()))]
    for row in stores.lance.scan("episodes", columns=columns).to_pylist():
        assert {k: row[k] for k in columns[1:]} == expected[row["episode_id"]]
    assert result.redactions == dict(sorted(counts.items()))


def test_secret_only_in_a_claim_predicate_is_redacted(ingest, stores):
    secret = SECRETS["aws_key"]
    ingest([json.dumps(episode(claims=[{"predicate": f"key {secret}", "object": "x"}]))])
    claims = stores.lance.scan("episodes", columns=["claims"]).to_pylist()[0]["claims"]
    assert secret not in claims and "[REDACTED:api_key]" in claims


# --- streaming ----------------------------------------------------------------------------


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_bad_vector_deep_in_a_big_file_is_reported_with_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_stage, "CHUNK_BYTES", 256 << 10)  # ~60 chunks
    rng = random.Random(5)
    vector = _vector(rng, "round6")
    lines = [json.dumps(episode(episode_id=f"e{i}", vector=vector)) for i in range(6000)]
    numbers = [str(round(rng.random(), 6)) for _ in range(DIM)]
    body = json.dumps(episode(episode_id="e4320"))[:-1]
    lines[4320] = body + ', "vector": [' + ", ".join([*numbers, "1.5"]) + "]}"  # 385 numbers
    body = json.dumps(episode(episode_id="e5998"))[:-1]
    lines[5998] = body + ', "vector": ["x", ' + ", ".join(numbers[1:]) + "]}"
    path = _write(tmp_path / "big.jsonl", lines)
    settings, stores = _store(tmp_path, "home")
    run = RunContext(now=NOW)
    with pytest.raises(ValidationFailed) as info:
        ingest_file(stores, settings, run, path, embedder=HashEmbedder(DIM))
    assert [(e.line, e.field) for e in info.value.errors] == [(4321, "vector"), (5999, "vector[0]")]
    assert "385 dimensions" in info.value.errors[0].reason
    assert "line 4321 (episode_id=e4320)" in str(info.value)
    assert stores.lance.count("episodes") == 0
    result = ingest_file(stores, settings, run, path, embedder=HashEmbedder(DIM), quarantine=True)
    assert (result.lines, result.inserted, result.quarantined) == (6000, 5998, 2)
    with stores.meta.connect() as con:
        got = con.execute("SELECT line_no, episode_id FROM quarantine ORDER BY 1").fetchall()
    assert got == [(4321, "e4320"), (5999, "e5998")]
    again = ingest_file(stores, settings, run, path, embedder=HashEmbedder(DIM), quarantine=True)
    assert (again.inserted, again.unchanged) == (0, 5998)


def test_conflicts_and_duplicates_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_stage, "CHUNK_LINES", 7)
    lines = [json.dumps(episode(episode_id=f"e{i}")) for i in range(40)]
    lines.append(lines[3])  # identical duplicate, other chunk
    settings, stores = _store(tmp_path, "home")
    run = RunContext(now=NOW)
    result = ingest_records(stores, settings, run, lines, embedder=HashEmbedder(DIM))
    assert (result.inserted, stores.lance.count("episodes")) == (40, 40)
    changed = [*lines, json.dumps(episode(episode_id="e5", goal="other")), lines[0]]
    changed.insert(2, json.dumps(episode(episode_id="new")))
    with pytest.raises(EpisodeConflict) as info:
        ingest_records(stores, settings, run, changed, embedder=HashEmbedder(DIM))
    assert info.value.conflicts == [(43, "e5")]
    with pytest.raises(EpisodeConflict) as info:
        ingest_records(
            stores,
            settings,
            run,
            [json.dumps(episode(episode_id="z")), json.dumps(episode(episode_id="e7", goal="x"))],
            embedder=HashEmbedder(DIM),
        )
    assert info.value.conflicts == [(2, "e7")]
    assert stores.lance.count("episodes") == 40


def test_blocks_are_cut_into_lines_like_splitlines(tmp_path):
    rng = random.Random(6)
    seps = ["\n", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029"]
    for trial in range(300):
        text = "".join(
            "".join(rng.choice("ab\u00e9\U0001f600 {}") for _ in range(rng.randint(0, 30)))
            + rng.choice(seps[: rng.choice([2, 3, len(seps)])])
            for _ in range(rng.randint(0, 25))
        )
        if rng.random() < 0.5:
            text += "tail"
        path = tmp_path / f"f{trial}.jsonl"
        path.write_bytes(text.encode())
        blocks = list(ingest_stage._file_blocks(path, block=rng.choice([1, 2, 5, 64])))
        assert b"".join(data for _, data in blocks) == text.encode()
        got: list[str] = []
        pos = 0
        for offset, data in blocks:
            assert offset == pos
            pos += len(data)
            spans = ingest_fast._line_spans(data)
            lines = data.decode().splitlines()
            ascii_breaks = any(c in data for c in b"\x0b\x0c\x1c\x1d\x1e")
            if spans is not None and not ascii_breaks:  # those are found line by line
                assert [data[a:b].decode() for a, b in zip(*spans, strict=True)] == lines
            got += lines
        assert got == text.splitlines()


def test_odd_line_breaks_number_lines_as_splitlines_does(tmp_path):
    good = [json.dumps(episode(episode_id=f"e{i}", vector=[0.25] * DIM)) for i in range(6)]
    for brk in ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\r"]:
        text = "\n".join(
            [good[0], good[1][:40] + brk + good[1][40:], good[2], brk, good[3], "", good[4]]
        )
        path = tmp_path / "odd.jsonl"
        path.write_text(text + "\n", encoding="utf-8", newline="")
        settings, stores = _store(tmp_path, f"home{ord(brk)}")
        run = RunContext(now=NOW)
        with pytest.raises(ValidationFailed) as info:
            ingest_file(stores, settings, run, path, embedder=HashEmbedder(DIM))
        with pytest.raises(ValidationFailed) as expected:
            ingest_records(stores, settings, run, text.splitlines(), embedder=HashEmbedder(DIM))
        assert info.value.errors == expected.value.errors, repr(brk)
        assert {e.line for e in info.value.errors} == {2, 3}, repr(brk)


def test_file_that_is_not_utf8_names_the_line_and_byte(tmp_path):
    path = tmp_path / "bad.jsonl"
    bad = json.dumps(episode(episode_id="e2", text="caf\u00e9")).encode()
    bad = bad.replace(b"caf\\u00e9", b"caf\xe9")  # Latin-1, not UTF-8
    path.write_bytes(
        json.dumps(episode(episode_id="e1")).encode() + b"\n" + bad + b"\n"
        + json.dumps(episode(episode_id="e3")).encode() + b"\r\n\n"
    )  # fmt: skip
    settings, stores = _store(tmp_path, "home")
    run = RunContext(now=NOW)
    with pytest.raises(ValidationFailed) as info:
        ingest_file(stores, settings, run, path, embedder=HashEmbedder(DIM))
    at = bad.index(b"\xe9")
    (error,) = info.value.errors
    assert (error.line, error.field, error.record_id) == (2, "(record)", "e2")
    assert error.reason == f"not UTF-8 text: invalid continuation byte at byte {at} of the line"
    assert str(info.value).startswith(f"{path}: 1 bad line(s), nothing written; first: line 2 ")
    assert stores.lance.count("episodes") == 0
    # --quarantine writes the good lines and quarantines that one instead of refusing the file
    result = ingest_file(stores, settings, run, path, embedder=HashEmbedder(DIM), quarantine=True)
    assert (result.lines, result.inserted, result.quarantined) == (3, 2, 1)
    with stores.meta.connect() as con:
        (row,) = con.execute("SELECT line_no, episode_id, raw FROM quarantine").fetchall()
    assert row[:2] == (2, "e2") and "caf\ufffd" in row[2]


def test_lines_nested_thousands_deep_are_bad_lines_not_crashes(tmp_path):
    deep = ["[" * 10_000 + "]" * 10_000, '{"a":' * 10_000 + "1" + "}" * 10_000]
    lines = [json.dumps(episode(episode_id="ok")), *deep]
    settings, stores = _store(tmp_path, "home")
    run = RunContext(now=NOW)
    with pytest.raises(ValidationFailed) as info:
        ingest_records(stores, settings, run, lines, embedder=HashEmbedder(DIM))
    assert [(e.line, e.field) for e in info.value.errors] == [(2, "(record)"), (3, "(record)")]
    assert all("not valid JSON" in e.reason for e in info.value.errors)
    result = ingest_records(
        stores, settings, run, lines, embedder=HashEmbedder(DIM), quarantine=True
    )
    assert (result.inserted, result.quarantined) == (1, 2)


def test_empty_blank_and_all_bad_inputs(tmp_path):
    settings, stores = _store(tmp_path, "home")
    run = RunContext(now=NOW)
    for lines in ([], ["", "  \t"]):
        result = ingest_records(stores, settings, run, lines, embedder=HashEmbedder(DIM))
        assert (result.lines, result.inserted) == (0, 0)
    path = _write(tmp_path / "blank.jsonl", ["", ""])
    assert ingest_file(stores, settings, run, path, embedder=HashEmbedder(DIM)).lines == 0
    bad = ["{", json.dumps(episode(outcome="meh"))]
    result = ingest_records(stores, settings, run, bad, embedder=HashEmbedder(DIM), quarantine=True)
    assert (result.lines, result.inserted, result.quarantined) == (2, 0, 2)
    assert stores.lance.count("episodes") == 0


def test_windows_line_ends_take_the_fast_path(tmp_path):
    lines = _mixed_lines(50, seed=9, styles=("round6", "repr", "ints"))
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    data = path.read_bytes()
    with VectorParser(DIM) as parser:
        chunk = ingest_fast.process_block(data, 1, dim=DIM, now=NOW, parser=parser)
    assert (chunk.exact, chunk.line_count, chunk.lines) == (0, len(lines), len(lines) - 1)
    settings, stores = _store(tmp_path, "crlf")
    result = ingest_file(stores, settings, RunContext(now=NOW), path, embedder=HashEmbedder(DIM))
    expected, expected_stores = _ingest(tmp_path, "lf", lines)
    assert _rows(stores) == _rows(expected_stores)
    assert result.as_dict() | {"path": "x"} == expected.as_dict() | {"path": "x"}


# --- the pieces ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "rest"),
    [
        ('{"a": 1, "vector": [1, 2]}', '{"a": 1}'),
        ('{"a": 1,"vector":[1,2] }  ', '{"a": 1 }  '),
        ('{"vector": [1, 2], "a": 1}', '{ "a": 1}'),
        ('{"a": 1, "vector": [1, 2], "b": 2}', '{"a": 1, "b": 2}'),
        ('{"a": "x\\"y", "vector": [1]}', '{"a": "x\\"y"}'),
        ('{"a": "\\\\", "vector": [1]}', '{"a": "\\\\"}'),
        ('{"a": {"b": [1]}, "vector": [1], "c": 1}', '{"a": {"b": [1]}, "c": 1}'),
        ('{"vector": []}', "{}"),
    ],
)
def test_split_vector_cuts_a_top_level_array(line, rest):
    cut = split_vector(line)
    assert cut is not None
    assert cut[0] == rest
    assert json.loads(cut[0]) == {k: v for k, v in json.loads(line).items() if k != "vector"}
    assert json.loads(cut[1]) == json.loads(line)["vector"]


@pytest.mark.parametrize(
    "line",
    [
        '{"a": "x, "vector": [1], "}',  # inside a string, the line is not JSON
        '{"a": {"vector": [1]}, "b": 1}',  # nested
        '{"a": ["vector", [1]], "b": 1}',
        '{"vector": [1, "2"]}',
        '{"vector": [1, NaN]}',
        '{"vector": [true]}',
        '{"vector": [1,/*c*/2]}',
        '{"vector": [1, 2, ]}',
        '{"vector": [1], }',
        '{"vector": [[1]]}',
        '{"vector": null}',
        '{"a": 1 "vector": [1]}',
        '{"a": 1, "vector": [1] "b": 2}',
        '"vector": [1]}',
        '{"a": "\\"", "b": "\\"vector\\": [1]"}',
    ],
)
def test_split_vector_refuses_what_it_cannot_prove(line):
    cut = split_vector(line)
    if cut is None:
        return
    rest, text = cut  # a cut that is taken must mean the same as the whole line
    whole = json.loads(line)
    assert text is None or json.loads(text) == whole["vector"]
    assert json.loads(rest) == {k: v for k, v in whole.items() if k != "vector"}


EDGE_NUMBERS = [
    *("-0", "-0.0", "0", "1E+05", "1e-400", "1e39", "-1e400", "1e-45", "1.5e7", "16777215"),
    *("16777216", str(2**60 + 2**36 + 1), str(-(2**62 + 2**38 + 1)), str(2**64 + 2**40 + 1)),
]


def test_vector_parser_matches_pydantic_bit_for_bit():
    rng = random.Random(7)
    tokens = []
    for _ in range(20000):
        kind = rng.random()
        if kind < 0.3:
            tokens.append(repr(rng.uniform(-1, 1)))
        elif kind < 0.5:
            tokens.append(f"{rng.uniform(-1, 1) * 10.0 ** rng.randint(-300, 300):.17g}")
        elif kind < 0.6:
            tokens.append(str(rng.randint(-(10**25), 10**25)))
        elif kind < 0.8:
            tokens.append(f"{rng.uniform(-1, 1):.{rng.randint(0, 20)}e}")
        elif kind < 0.9:  # halfway between two floats: rounding twice must match the exact path
            low = np.float32(rng.gauss(0, 1))
            mid = (Decimal(float(low)) + Decimal(float(np.nextafter(low, np.float32(9))))) / 2
            step = Decimal(float(np.spacing(float(mid)))) * Decimal(rng.choice([0, 1, -1])) / 3
            tokens.append(format(mid + step, ".30e"))
        else:
            tokens.append(rng.choice(EDGE_NUMBERS))
    dim = 10
    texts = [f"[{', '.join(tokens[i : i + dim])}]" for i in range(0, len(tokens), dim)]
    buf = "\n".join(texts).encode()
    starts = np.cumsum([0] + [len(t) + 1 for t in texts[:-1]]).tolist()
    ends = [a + len(t) for a, t in zip(starts, texts, strict=True)]
    with VectorParser(dim) as parser:
        vectors, ok = parser.parse(buf, starts, ends)
    as_floats = TypeAdapter(list[float]).validate_json  # what the exact path does
    for text, vector, fine in zip(texts, vectors, ok, strict=True):
        with np.errstate(over="ignore"):
            expected = np.asarray(as_floats(text), dtype=np.float32)
        # refused (left to the exact path): not finite once a float, 2**24 and beyond, zero
        assert fine == bool((np.abs(expected) < 2**24).all() and expected.any())
        if fine:
            assert vector.tobytes() == expected.tobytes()


def test_fast_secret_screen_is_exact():
    rng = random.Random(8)
    pieces = [
        *SECRETS.values(),
        *CONTEXT.values(),
        "-----BEGIN ",
        "PRIVATE KEY-----",
        "Bearer ",
        "bearer\t",
        "abcdefghijklmnop",
        "sk-",
        "sk-ant-",
        "AKIA",
        "ASIA",
        "IOSFODNN7EXAMPLE",
        "ghp_",
        "github_pat_",
        "xoxb-",
        "AIza",
        "://",
        "admin",
        "@",
        ":",
        "=",
        "password",
        "Passwd",
        "PWD",
        "secret",
        "api_key",
        "api-key",
        "Access_Token",
        "key",
        "token",
        " ",
        "\t",
        "\n",
        "4111",
        "1111",
        "-",
        "5500 5076 9041 8387",
        "12",
        ".",
        "x",
        "\u00e9",
        "\u017f",
        "\u212a",
        "_",
        "'",
        '"',
    ]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert might_hold_secret(text) == bool(_SCREEN.search(text)), repr(text)
        assert redact_text(text) == _slow_redact(text)


def _slow_redact(text: str) -> str:
    from memory_core.stages.ingest.redact import _PATTERNS, _replacer

    if not _SCREEN.search(text):
        return text
    counts: Counter[str] = Counter()
    for kind, pattern in _PATTERNS:
        text = pattern.sub(_replacer(kind, counts), text)
    return text


def test_recorded_at_keeps_its_instant(ingest, stores):
    ingest([json.dumps(episode(recorded_at="2026-07-02T01:00:00+02:00"))])
    row = stores.lance.scan("episodes", columns=["recorded_at"]).to_pylist()[0]
    assert row["recorded_at"] == datetime(2026, 7, 1, 23, 0, tzinfo=UTC)
