"""Ingest: JSONL episodes in, each line validated and passed through the write gate, written once.

Guarantees: every bad line is reported (line, field, reason) and nothing is written unless all
lines are good (``quarantine=True`` keeps the bad ones aside instead); the same id with the same
content is a no-op, other content a conflict; secrets are redacted before anything is stored
or logged; claims made by tools or agents carry no authority (invariant 5).

Modules: ``stage`` (read, embed, write), ``blocks`` (per-block cut, parse, validate),
``write_gate`` (redaction and claim authority: what a row becomes before it is stored),
``redact`` (the write gate's secret redaction).
"""

from memory_core.stages._exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {"stage": ["IngestResult", "ingest_file", "ingest_records", "parse_lines", "write_quarantine"]},
)
