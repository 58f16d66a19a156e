"""Ingest's per-block work: cut, parse, validate and gate many JSONL lines at once.

Why this shape
--------------
A supplied vector is ~90% of a line (384 numbers), and validating it as ``list[float]``
(384 Python floats, ~40 us a line) dominated ingest. So each line whose ``"vector"`` is one
top-level array of plain numbers is cut in two, on the bytes of the block (no per-line
``str`` of the whole line is made): the rest of the line is validated by pydantic as usual
(~7 us without the vector), and the arrays of the whole block are parsed by one DuckDB
``from_json`` call reading them in place (yyjson, C++) straight into float32, rounded as the
exact path rounds (number -> nearest double -> nearest float).

The cut is only trusted when it provably changes nothing (see ``cut_vector``): the key is
outside every string at the top level of the object, the array holds no string, comment or
literal, and the rest validates with no vector of its own. Any line that fails a check, the
vector parse (anything but ``dim`` finite numbers), or validation takes the exact path --
``Episode.model_validate_json`` of the whole line, as before -- which also writes every
error message, so the fast and the exact path store the same rows and report the same
errors (tests/stages/ingest/test_ingest_fast.py ingests the same mixed input both ways).

Gating (redaction, claim authority) and the content hash work on the validated model's
fields, in ``write_gate.py``.
Secrets are screened once per line, over all its redactable texts joined, with
``might_hold_secret`` (literal tests before any regex).

Per line, measured on 2 cores (CPU, 384-d vectors): block reading and cutting ~5 us,
DuckDB vector parse ~11 us, pydantic ~7 us, gate and hash ~6 us, Arrow columns ~2 us.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
from pydantic import ValidationError

from memory_core.errors import FieldError
from memory_core.models import (
    NO_CONTROL_PATTERN,
    Episode,
    no_control,
)
from memory_core.stages.ingest.redact import redact_text
from memory_core.stages.ingest.write_gate import ROW_COLUMNS, ROW_SCHEMA, gate_episode

__all__ = [
    "Chunk",
    "VectorParser",
    "cut_vector",
    "exact_line",
    "field_errors",
    "process_block",
    "process_chunk",
    "split_vector",
]

logger = logging.getLogger(__name__)

_VECTOR_KEY = re.compile(rb'"vector"[ \t]*:[ \t]*\[')
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')


@dataclass
class Chunk:
    """The validated, gated good lines of one chunk, and the bad ones with their errors."""

    table: pa.Table  # ROW_COLUMNS, in line order
    vectors: np.ndarray  # (rows, dim) float32; zeros where none was supplied
    has_vector: np.ndarray  # (rows,) bool
    errors: list[FieldError] = field(default_factory=list)
    bad_raw: dict[int, str] = field(default_factory=dict)
    lines: int = 0  # non-blank lines
    line_count: int = 0  # all lines, blank ones too: the next chunk's first line follows
    redactions: Counter[str] = field(default_factory=Counter)
    exact: int = 0  # good lines that took the exact path (for tests and profiling)


# --- the cut ------------------------------------------------------------------------------

_WS = b" \t"


def cut_vector(buf: bytes, start: int, end: int) -> tuple[bytes, int, int] | None:
    """Cut ``"vector": [...]`` out of the line ``buf[start:end]`` (UTF-8 JSON).

    ``(rest, vector_start, vector_end)``: the line without the member, and where its array
    (brackets included) is in ``buf``; ``(line, -1, -1)`` when the line has no
    ``"vector"``; None when the cut cannot be trusted, so the line takes the exact path.
    The cut is trusted only if validating ``rest`` and parsing the array means exactly what
    validating the whole line means:

    * the key is outside every string (an even number of unescaped quotes before it) and at
      depth 1, a member of the top-level object (no counting needed when the array is
      followed only by the closing brace: if ``rest`` validates, that brace closes the
      top-level object);
    * it sits between members (``{`` or ``,`` before, ``,`` or ``}`` after), so removing it
      and one comma leaves valid JSON exactly when the line was;
    * the array holds no string, comment or literal (no ``"``, ``/``, ``a``, ``u``; NaN and
      Infinity are refused as non-finite after parsing) and no trailing comma: where
      DuckDB's JSON reader is laxer than pydantic's.

    A second ``"vector"`` key would survive in ``rest``: the caller routes a rest that
    validates with a vector to the exact path. Works on bytes: UTF-8 never puts an ASCII
    byte inside a multi-byte character, so counting quotes and braces is exact.
    """
    i = buf.find(b'"vector"', start, end)
    if i < 0:
        return buf[start:end], -1, -1
    match = _VECTOR_KEY.match(buf, i, end)
    if match is None:
        return None
    k = match.end() - 1  # '['
    j = buf.find(b"]", k, end)
    if j < 0:
        return None
    if (
        buf.find(b'"', k, j) >= 0
        or buf.find(b"/", k, j) >= 0
        or buf.find(b"a", k, j) >= 0
        or buf.find(b"u", k, j) >= 0
    ):
        return None
    last = j - 1
    while buf[last] in _WS:
        last -= 1
    if buf[last] == 44:  # ',' before ']'
        return None
    before = i - 1
    while before >= start and buf[before] in _WS:
        before -= 1
    after = j + 1
    while after < end and buf[after] in _WS:
        after += 1
    if before < start or after >= end:
        return None
    prefix = None
    if buf.find(b"\\", start, i) < 0:
        quotes = buf.count(b'"', start, i)
    else:
        prefix = _ESCAPE.sub(b"", buf[start:i])
        quotes = prefix.count(b'"')
    if quotes % 2:
        return None
    opener, closer = buf[before], buf[after]
    if closer != 125 or buf[after + 1 : end].strip():  # not the last member: count depth
        bare = _STRING.sub(b"", buf[start:i] if prefix is None else prefix)
        if bare.count(b"{") + bare.count(b"[") - bare.count(b"}") - bare.count(b"]") != 1:
            return None
    if opener == 44 and closer in (44, 125):  # ',' ... ',' or '}'
        return buf[start:before] + buf[j + 1 : end], k, j + 1
    if opener == 123 and closer == 125:  # '{' ... '}'
        return buf[start:i] + buf[j + 1 : end], k, j + 1
    if opener == 123 and closer == 44:  # '{' ... ','
        following = after + 1
        while following < end and buf[following] in _WS:
            following += 1
        if following < end and buf[following] == 125:  # `{"vector": [..],}`
            return None
        return buf[start:i] + buf[after + 1 : end], k, j + 1
    return None


def split_vector(line: str) -> tuple[str, str | None] | None:
    """``cut_vector`` for one ``str`` line: ``(rest, "[...]" or None)`` or None."""
    data = line.encode()
    cut = cut_vector(data, 0, len(data))
    if cut is None:
        return None
    rest, k, j = cut
    return rest.decode(), (data[k:j].decode() if k >= 0 else None)


# --- vectors ------------------------------------------------------------------------------


_FLOAT_INT_EXACT = np.float32(1 << 24)


class VectorParser:
    """Parses many JSON number arrays at once with DuckDB's ``from_json`` (yyjson, C++).

    ``parse`` returns a ``(n, dim)`` float32 array and a mask of the arrays that parsed to
    exactly ``dim`` numbers the fast path may keep (the rest take the exact path). DuckDB
    reads a decimal number as the correctly rounded double and casts it to float, as the
    exact path does (pydantic float, then numpy float32): the same bits, float midpoints
    included (tested). Arrays with a value of magnitude 2**24 or more, or not finite, are
    refused (see ``parse``). (A worker thread does not pay: DuckDB's client takes the GIL
    back while it runs.)
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._con: duckdb.DuckDBPyConnection | None = None
        self._broken = False

    def __enter__(self) -> VectorParser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def parse(
        self, buf: bytes, starts: Sequence[int], ends: Sequence[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The arrays at ``buf[starts[i]:ends[i]]``: ``(n, dim)`` float32 and the ok mask."""
        n, dim = len(starts), self.dim
        if n == 0 or self._broken:
            return np.zeros((n, dim), np.float32), np.zeros(n, bool)
        try:
            lists = self._from_json(buf, starts, ends)
        except duckdb.Error as exc:  # e.g. no JSON extension: everything takes the exact path
            logger.warning("vector fast path unavailable (%s); using the exact path", exc)
            self._broken = True
            return np.zeros((n, dim), np.float32), np.zeros(n, bool)
        offsets = lists.offsets.to_numpy()
        ok = np.diff(offsets) == dim
        if lists.null_count:
            ok &= lists.is_valid().to_numpy(zero_copy_only=False)
        values = lists.values
        if values.null_count:
            values = values.fill_null(float("nan"))
        flat = values.to_numpy(zero_copy_only=False)
        # NaN, infinity (or beyond float range: NaN here) and |x| >= 2**24 go the exact way:
        # DuckDB rounds an integer such as 2**60 + 2**36 + 1 to float once, the exact path
        # twice (int -> double -> float), which can differ; below 2**24 both are exact.
        bad = np.flatnonzero(~(np.abs(flat) < _FLOAT_INT_EXACT))
        if bad.size:
            ok[np.searchsorted(offsets, bad, side="right") - 1] = False
        # an all-zero vector is refused (models.finite_vector): the exact path says so
        # one pass over the values (reduceat per array); an empty array's result is
        # meaningless, but it is not ``dim`` long, so not ok anyway
        padded = np.append(flat != 0, False)
        ok &= np.logical_or.reduceat(padded, offsets)[:-1]
        if ok.all() and offsets[0] == 0:
            return flat[: n * dim].reshape(n, dim), ok
        out = np.zeros((n, dim), np.float32)
        rows = np.flatnonzero(ok)
        out[rows] = flat[offsets[rows, None] + np.arange(dim)]
        return out, ok

    def _from_json(self, buf: bytes, starts: Sequence[int], ends: Sequence[int]) -> pa.ListArray:
        """DuckDB reads the arrays in place: a string column over ``buf`` whose even rows are
        the arrays and odd rows what lies between them (filtered out before parsing)."""
        if self._con is None:
            self._con = duckdb.connect(config={"threads": 1})
        con = self._con
        n = len(starts)
        offsets = np.empty(2 * n, np.int64)
        offsets[0::2] = starts
        offsets[1::2] = ends
        rows = 2 * n - 1
        column = pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(buf))
        table = pa.table({"v": column, "keep": pa.array(np.arange(rows) % 2 == 0)})
        try:  # one bad array fails the query; then again, with bad ones as NULL (~5% slower)
            result = self._query(con, table, "from_json(v, '[\"FLOAT\"]')")
        except duckdb.Error:
            result = self._query(con, table, "try(from_json(v, '[\"FLOAT\"]'))")
        parsed = result.column(0)
        lists = parsed.combine_chunks() if parsed.num_chunks != 1 else parsed.chunk(0)
        if len(lists) != n:
            msg = f"vector parse returned {len(lists)} rows for {n}"
            raise duckdb.Error(msg)
        return lists

    @staticmethod
    def _query(con: duckdb.DuckDBPyConnection, table: pa.Table, expression: str) -> pa.Table:
        return con.from_arrow(table).filter("keep").select(f"{expression} AS v").to_arrow_table()


# --- the exact path -----------------------------------------------------------------------


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(record)"


def _record_id(raw: str) -> str | None:
    try:
        value = json.loads(raw)  # not orjson: json takes NaN and huge ints, as it always did
    except (ValueError, RecursionError):  # RecursionError: arrays nested thousands deep
        return None
    rid = value.get("episode_id") if isinstance(value, dict) else None
    return redact_text(rid) if isinstance(rid, str) else None


def field_errors(number: int, raw: str, exc: ValidationError) -> list[FieldError]:
    """One ``FieldError`` per pydantic error of a line: line, field path, reason."""
    rid = _record_id(raw)
    errors = []
    for err in exc.errors(include_url=False):
        reason = err["msg"].removeprefix("Value error, ")
        if err["type"] == "json_invalid":
            reason = f"not valid JSON: {err.get('ctx', {}).get('error', reason)}"
        elif err["type"] == "string_pattern_mismatch" and _is_id_pattern(err):
            try:  # the position and code point only: the id itself may hold anything
                no_control(str(err.get("input", "")))
            except ValueError as found:
                reason = f"{found}; ids may not hold control characters (NUL, line breaks, tabs)"
        errors.append(FieldError(number, _loc(err["loc"]), reason, rid))
    return errors


def _is_id_pattern(err: Any) -> bool:
    return err.get("ctx", {}).get("pattern") == NO_CONTROL_PATTERN


def exact_line(
    number: int, raw: str, dim: int | None
) -> tuple[Episode | None, np.ndarray | None, list[FieldError]]:
    """Validate a whole line with pydantic: ``(episode, float32 vector or None, errors)``."""
    try:
        episode = Episode.model_validate_json(raw)
    except ValidationError as exc:
        return None, None, field_errors(number, raw, exc)
    if episode.vector is None:
        return episode, None, []
    if dim is not None and len(episode.vector) != dim:
        reason = f"has {len(episode.vector)} dimensions, the store expects {dim}"
        return None, None, [FieldError(number, "vector", reason, episode.episode_id)]
    with np.errstate(over="ignore"):
        vector = np.asarray(episode.vector, dtype=np.float32)
    if np.isnan(vector).any():  # pydantic takes NaN; the Lance write would refuse the batch
        reason = "has NaN values; vectors must be numbers"
        return None, None, [FieldError(number, "vector", reason, episode.episode_id)]
    return episode, vector, []


# --- the gate -----------------------------------------------------------------------------


# --- a chunk ------------------------------------------------------------------------------

# Line breaks of str.splitlines besides "\n" and "\r\n": where present, lines are cut by
# decoding (cutting at "\n" would number lines differently). The non-ASCII ones may sit in
# a valid JSON string, so a block is checked for them up front; the ASCII ones are control
# characters that no valid line holds (pydantic and DuckDB refuse them raw), so only lines
# that are not taken as they are (blank-looking or refused ones) are checked.
_ASCII_BREAKS = (b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e")
_UTF8_BREAKS = (b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")


class _Resplit(Exception):  # control flow, never leaves this module
    """A line holds a line break that ``str.splitlines`` honours: cut the block by decoding."""


def _has_ascii_break(buf: bytes, start: int, end: int) -> bool:
    return any(buf.find(sep, start, end) >= 0 for sep in _ASCII_BREAKS)


def _line_spans(data: bytes) -> tuple[list[int], list[int]] | None:
    """Where ``data.decode().splitlines()`` cuts, as byte offsets, assuming no ASCII break
    but "\n" and "\r\n" (see above); None when only decoding can tell (a lone carriage
    return, a Unicode line break)."""
    crlf = b"\r" in data
    if crlf and data.count(b"\r") != data.count(b"\r\n"):
        return None
    if not data.isascii() and any(sep in data for sep in _UTF8_BREAKS):
        return None
    starts: list[int] = []
    ends: list[int] = []
    pos, size, find = 0, len(data), data.find
    while pos < size:
        stop = find(b"\n", pos)
        if stop < 0:
            stop = size
        starts.append(pos)
        ends.append(stop - 1 if crlf and stop > pos and data[stop - 1] == 13 else stop)
        pos = stop + 1
    return starts, ends


def process_block(
    data: bytes,
    first_line: int,
    *,
    dim: int,
    now: datetime,
    parser: VectorParser | None = None,
    keep_bad: bool = True,
) -> Chunk:
    """Validate and gate a block of whole lines of a UTF-8 file (numbered from ``first_line``).

    Never raises on bad lines: a line that is not UTF-8 is reported (and kept, for the
    quarantine, with U+FFFD for the bytes that are not) like any other bad line.
    """
    try:
        text = None if data.isascii() else data.decode()
    except UnicodeDecodeError:
        return _process_not_utf8(data, first_line, dim, now, parser, keep_bad=keep_bad)
    spans = _line_spans(data)
    if spans is not None:
        try:
            return _process(data, spans, None, first_line, dim, now, parser, keep_bad)
        except _Resplit:
            pass
    lines = (data.decode() if text is None else text).splitlines()
    return process_chunk(lines, first_line, dim=dim, now=now, parser=parser, keep_bad=keep_bad)


def _process_not_utf8(
    data: bytes,
    first_line: int,
    dim: int,
    now: datetime,
    parser: VectorParser | None,
    *,
    keep_bad: bool,
) -> Chunk:
    """A block with bytes that are not UTF-8: each ``\n``-line that does not decode is one
    bad line (numbered as the file is); the others are cut as ``str.splitlines`` cuts them."""
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()  # the block ends with a line break
    lines: list[str] = []
    undecodable: list[tuple[int, str, UnicodeDecodeError]] = []
    for piece in pieces:
        try:
            decoded = piece.decode()
        except UnicodeDecodeError as exc:
            undecodable.append((len(lines), piece.decode(errors="replace").rstrip("\r"), exc))
            lines.append("")  # a blank stand-in keeps the numbering; reported below
            continue
        lines.extend(decoded.splitlines() or [""])
    chunk = process_chunk(lines, first_line, dim=dim, now=now, parser=parser, keep_bad=keep_bad)
    for idx, raw, exc in undecodable:
        number = first_line + idx
        reason = f"not UTF-8 text: {exc.reason} at byte {exc.start} of the line"
        chunk.errors.append(FieldError(number, "(record)", reason, _record_id(raw)))
        if keep_bad:
            chunk.bad_raw[number] = raw
        chunk.lines += 1
    chunk.errors.sort(key=lambda e: e.line)
    return chunk


def process_chunk(
    lines: Sequence[str],
    first_line: int,
    *,
    dim: int,
    now: datetime,
    parser: VectorParser | None = None,
    keep_bad: bool = True,
) -> Chunk:
    """Validate and gate ``lines`` (numbered from ``first_line``); never raises on bad input.

    Without a ``parser`` every line takes the exact path.
    """
    encoded: list[bytes] = []
    for line in lines:
        try:
            encoded.append(line.encode())
        except UnicodeEncodeError:  # a lone surrogate: a stand-in that fails validation
            encoded.append(b"\n")  # sends the line to the exact path, which reports it
    starts, ends, pos = [], [], 0
    for item in encoded:
        starts.append(pos)
        pos += len(item)
        ends.append(pos)
        pos += 1
    return _process(
        b"\n".join(encoded), (starts, ends), lines, first_line, dim, now, parser, keep_bad
    )


def _process(
    buf: bytes,
    spans: tuple[list[int], list[int]],
    lines: Sequence[str] | None,
    first_line: int,
    dim: int,
    now: datetime,
    parser: VectorParser | None,
    keep_bad: bool,  # noqa: FBT001
) -> Chunk:
    starts, ends = spans
    count = 0
    exact: list[tuple[int, int]] = []  # (line number, index)
    fast: list[tuple[int, int, bytes, int]] = []  # (line, index, rest, index into vectors)
    vec_starts: list[int] = []
    vec_ends: list[int] = []
    for idx, (start, end) in enumerate(zip(starts, ends, strict=True)):
        if start == end or buf[start] != 123:  # not '{': maybe blank
            if lines is None and _has_ascii_break(buf, start, end):
                raise _Resplit
            text = lines[idx] if lines is not None else buf[start:end].decode()
            if not text.strip():
                continue
        count += 1
        number = first_line + idx
        cut = cut_vector(buf, start, end) if parser is not None else None
        if cut is None:
            exact.append((number, idx))
            continue
        rest, k, j = cut
        if k < 0:
            fast.append((number, idx, rest, -1))
        else:
            fast.append((number, idx, rest, len(vec_starts)))
            vec_starts.append(k)
            vec_ends.append(j)
    if parser is not None and vec_starts:
        fast_vectors, fast_ok = parser.parse(buf, vec_starts, vec_ends)
    else:
        fast_vectors, fast_ok = np.zeros((0, dim), np.float32), np.zeros(0, bool)

    # (line, index into fast_vectors or -1, row, redactions) of the good lines
    good: list[tuple[int, int, tuple[Any, ...], Counter[str] | None]] = []
    validate = Episode.__pydantic_validator__.validate_json
    for number, idx, rest, ref in fast:
        try:
            episode = validate(rest)
        except ValidationError:
            exact.append((number, idx))
            continue
        if episode.vector is not None or (ref >= 0 and not fast_ok[ref]):
            exact.append((number, idx))  # a second "vector" key, or a vector DuckDB refused
            continue
        row, counts = gate_episode(number, episode, now, has_vector=ref >= 0)
        good.append((number, ref, row, counts))

    errors: list[FieldError] = []
    bad_raw: dict[int, str] = {}
    exact_vectors: dict[int, np.ndarray] = {}
    n_exact = 0
    if lines is None and any(_has_ascii_break(buf, starts[i], ends[i]) for _, i in exact):
        raise _Resplit
    for number, idx in sorted(exact):
        raw = lines[idx] if lines is not None else buf[starts[idx] : ends[idx]].decode()
        episode, vector, errs = exact_line(number, raw, dim)
        if episode is None:
            errors += errs
            if keep_bad:
                bad_raw[number] = raw
            continue
        if vector is not None:
            exact_vectors[number] = vector
        row, counts = gate_episode(number, episode, now, has_vector=vector is not None)
        good.append((number, -1, row, counts))
        n_exact += 1
    if n_exact:
        good.sort(key=lambda item: item[0])

    vectors = np.zeros((len(good), dim), np.float32)
    has_vector = np.zeros(len(good), bool)
    redactions: Counter[str] = Counter()
    take_rows: list[int] = []
    take_from: list[int] = []
    for pos, (number, ref, _, counts) in enumerate(good):
        if ref >= 0:
            take_rows.append(pos)
            take_from.append(ref)
        elif number in exact_vectors:
            vectors[pos] = exact_vectors[number]
            has_vector[pos] = True
        if counts:
            redactions.update(counts)
    if take_rows and len(take_rows) == len(good) == len(fast_vectors):
        vectors = fast_vectors  # every good line took the fast path with a vector, in order
        has_vector[:] = True
    elif take_rows:
        vectors[take_rows] = fast_vectors[take_from]
        has_vector[take_rows] = True
    table = ROW_SCHEMA.empty_table()
    if good:
        columns = zip(*[item[2] for item in good], strict=True)
        table = pa.Table.from_arrays(
            [pa.array(col, kind) for col, (_, kind) in zip(columns, ROW_COLUMNS, strict=True)],
            schema=ROW_SCHEMA,
        )
    return Chunk(
        table=table,
        vectors=vectors,
        has_vector=has_vector,
        errors=errors,
        bad_raw=bad_raw,
        lines=count,
        line_count=len(starts),
        redactions=redactions,
        exact=n_exact,
    )
