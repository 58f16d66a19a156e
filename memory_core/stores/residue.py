"""What a deletion must not leave anywhere: needles, and the scan of every byte under the home.

Row-level checks (every Lance version, every DuckDB text column) prove the stores hold no
live row of a forgotten subject. They cannot see bytes outside rows: DuckDB's freed blocks,
a SQLite database the orchestrator keeps under the home, pickled results, log files, copies
of input the product wrote (``<home>/demo``). ``scan_home`` reads every file under the home,
so a receipt's ``verified: true`` is a statement about bytes, not only about rows.

A name (subject or episode id) matches where it stands alone: ``ann`` is not named by
``joanna`` or ``ann.lee``. It is searched as stored UTF-8 and JSON-escaped (``\\u00eb``).
A record id matches anywhere (Arrow and index pages store strings back to back, with no
separator to stand alone by), except inside a kept id that contains it: deleting episode
``conv-43:D2:1`` leaves the other speaker's ``conv-43:D2:10`` rightly stored.
Compressed pages (Lance, DuckDB) are covered by the row-level checks, not by this scan.

Files are read in chunks, never memory-mapped: a file under the home may shrink while it is
scanned (SQLite truncates its write-ahead log at a checkpoint, DuckDB its own), and touching a
mapped page past the new end kills the process with SIGBUS, mid-deletion.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

__all__ = [
    "Needles",
    "Orchestrator",
    "home_files",
    "scan_home",
    "scrub_product_inputs",
    "shadows_of",
    "spellings",
]

_ID_BYTES = rb"A-Za-z0-9_.@\-"
_NOT_ID_BEFORE = rb"(?<![" + _ID_BYTES + rb"])"
_NOT_ID_AFTER = rb"(?![" + _ID_BYTES + rb"])"
_MIN_TEXT = 16  # shorter statements ("ok", "thanks") say nothing about anyone
_MIN_FREE_NAME = 6  # bytes: a shorter name is searched JSON-quoted only
_MIN_ID = 12  # bytes: shorter ids are checked row by row, not in raw bytes
_CHUNK_BYTES = 8 << 20  # read at a time by the home scan
# bytes of context kept on each side of a chunk beyond the longest needle and kept id: a
# quoted short name may be followed by escape backslashes (``\\"u1\\"``), and the pattern
# must see them
_CONTEXT_BYTES = 4096


@dataclass(frozen=True)
class Needles:
    """What identifies a forgotten target's data outside our own rows.

    ``names``: the subject (or episode) id, matched as a whole id; ``ids``: its record and
    candidate ids, matched anywhere; ``texts``: its verbatim statements, matched anywhere.
    """

    names: tuple[str, ...]
    ids: tuple[str, ...] = ()
    texts: tuple[str, ...] = field(default=())

    @classmethod
    def of(
        cls, names: Iterable[str], ids: Iterable[str] = (), texts: Iterable[str] = ()
    ) -> Needles:
        return cls(
            names=tuple(sorted({n for n in names if n})),
            ids=tuple(sorted({i for i in ids if i})),
            texts=tuple(sorted({t for t in texts if t and len(t.strip()) >= _MIN_TEXT})),
        )

    def _name_patterns(self) -> list[re.Pattern[bytes]]:
        """A long name as a whole id; a short one only JSON-quoted (``"u1"``): two free
        bytes turn up by chance in binary pages (vectors), a quoted six do not."""
        return [pattern for _, pattern, _ in self._name_probes()]

    def _name_probes(self) -> list[tuple[bytes, re.Pattern[bytes], int]]:
        """(literal, pattern, bytes a match starts before the literal) per name spelling:
        ``_holds_name`` finds the literal first and tries the pattern only there."""
        out = []
        for name in self.names:
            for spelling in spellings(name):
                raw = spelling.encode()
                if len(raw) < _MIN_FREE_NAME:
                    quoted = rb'\\*"' + re.escape(raw) + rb'\\*"'  # "u1", \"u1\" in JSON in JSON
                    out.append((raw, re.compile(quoted), 1))
                else:
                    pattern = _NOT_ID_BEFORE + re.escape(raw) + _NOT_ID_AFTER
                    out.append((raw, re.compile(pattern), 0))
        return out

    def _plain(self) -> list[bytes]:
        """Ids long enough not to occur by chance (generated ids are), and the texts."""
        return [
            s.encode()
            for x in (*self.ids, *self.texts)
            if len(x.encode()) >= _MIN_ID
            for s in spellings(x)
        ]

    def plain_strings(self) -> list[str]:
        """Every spelling of every needle, for a coarse substring prefilter."""
        return sorted({s for x in (*self.names, *self.ids, *self.texts) for s in spellings(x)})

    def found_in(self, text: str | bytes) -> list[str]:
        """Which kinds of needle (``name``, ``id``, ``text``) ``text`` holds."""
        blob = text.encode() if isinstance(text, str) else text
        kinds = []
        if any(p.search(blob) for p in self._name_patterns()):
            kinds.append("name")
        if any(s.encode() in blob for i in self.ids if len(i.encode()) >= _MIN_ID
               for s in spellings(i)):  # fmt: skip
            kinds.append("id")
        if any(s.encode() in blob for t in self.texts for s in spellings(t)):
            kinds.append("text")
        return kinds


def spellings(value: str) -> list[str]:
    """``value`` as stored, as a JSON string body (ASCII-escaped or not), and as the body of
    a JSON string that itself holds JSON (an artifact's data, a form's value)."""

    def body(x: str, *, ascii_only: bool) -> str:
        return json.dumps(x, ensure_ascii=ascii_only)[1:-1]

    out = {value}
    for ascii_only in (True, False):
        once = body(value, ascii_only=ascii_only)
        out |= {once, body(once, ascii_only=ascii_only)}
    return sorted(out)


class Orchestrator(Protocol):
    """The orchestrator's copies (Prefect: artifacts, run inputs, results, logs, events).

    The library never imports the orchestrator; ``flows/privacy.py`` implements this and the
    CLI and the deletion flow hand it to ``forget``.
    """

    def purge(self, needles: Needles) -> list[dict[str, str]]:
        """Remove every object holding a needle; returns them as ``{"kind", "id"}``."""
        ...

    def residue(self, needles: Needles) -> dict[str, int]:
        """Objects still holding a needle, by kind (empty when clean)."""
        ...


def home_files(home: Path) -> Iterator[Path]:
    """Every regular file under the home (symlinks are not followed)."""
    for path in sorted(home.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


_Probe = tuple[bytes, re.Pattern[bytes], int]


def _holds_name(
    data: bytes | bytearray,
    probes: list[_Probe],
    lo: int = 0,
    hi: int | None = None,
    end: int | None = None,
) -> bool:
    """Whether a name pattern matches in ``data[:end]`` with its literal starting in
    ``[lo, hi)`` (all of ``data`` by default): the same answer as ``pattern.search``.

    Why: a pattern that opens with a lookbehind defeats ``re``'s literal-prefix search and
    crawled at ~17 MB/s over Lance data files (the byte scan cost more than the deletion it
    verifies); ``find`` locates the literal at memory speed and the pattern is tried only where
    a match could start (at the literal, or at the quote right before it)."""
    end = len(data) if end is None else end
    for raw, pattern, back in probes:
        stop = end if hi is None else min(end, hi + len(raw) - 1)
        pos = data.find(raw, lo, stop)
        while pos >= 0:
            if pos >= back and pattern.match(data, pos - back, end):
                return True
            pos = data.find(raw, pos + 1, stop)
    return False


Shadows = dict[bytes, list[tuple[bytes, int]]]
"""Per needle spelling: the kept ids' spellings that contain it, and where in them it starts."""


def shadows_of(needles: Needles, kept: Iterable[str]) -> Shadows:
    """Kept ids that contain a needle id (``conv-43:D2:10`` holds ``conv-43:D2:1``): an
    occurrence of the needle inside one of them is the kept record's, not residue."""
    plain = set(needles._plain())
    lengths = sorted({len(x) for x in plain})
    out: Shadows = {}
    for kept_id in kept:
        for spelling in spellings(kept_id):
            raw = spelling.encode()
            for size in lengths:
                for at in range(len(raw) - size + 1):  # every substring of a needle's length
                    piece = raw[at : at + size]
                    if piece in plain and piece != raw:
                        out.setdefault(piece, []).append((raw, at))
    return out


def _holds_plain(
    data: bytes | bytearray,
    needle: bytes,
    shadows: Shadows,
    lo: int = 0,
    hi: int | None = None,
    end: int | None = None,
) -> bool:
    """Whether ``needle`` occurs in ``data[:end]``, starting in ``[lo, hi)`` (everywhere by
    default), other than inside a kept id that contains it."""
    end = len(data) if end is None else end
    cover = shadows.get(needle)
    stop = end if hi is None else min(end, hi + len(needle) - 1)
    pos = data.find(needle, lo, stop)
    while pos >= 0:
        if not cover or not any(
            pos >= at and pos - at + len(raw) <= end and data[pos - at : pos - at + len(raw)] == raw
            for raw, at in cover
        ):
            return True
        pos = data.find(needle, pos + 1, stop)
    return False


def _windows(fh: BinaryIO, margin: int, chunk: int) -> Iterator[tuple[bytearray, int, int, int]]:
    """The file as (buffer, lo, hi, end): every offset falls in exactly one ``[lo, hi)``, and
    ``buffer[:end]`` holds ``margin`` bytes on both sides of it (less only at the file's
    ends), so a match is judged once, where it starts, with all the context it needs. One
    buffer is reused (read into, its tail moved to the front): no copy per chunk. A file that
    shrinks meanwhile just ends sooner."""
    buf = bytearray(chunk + 2 * margin)
    view = memoryview(buf)
    end, lo = 0, 0
    while True:
        got = fh.readinto(view[end:])
        end += got
        hi = end if not got else max(lo, end - margin)
        if hi > lo:
            yield buf, lo, hi, end
        if not got:
            return
        keep = max(0, hi - margin)  # what stays: the context before the next window
        tail = bytes(view[keep:end])  # a copy: the move may overlap itself
        buf[: len(tail)] = tail
        end, lo = len(tail), hi - keep


def _margin(probes: list[_Probe], plain: list[bytes], shadows: Shadows, context: int) -> int:
    """Context a window needs: the longest literal and kept id, and the pattern's slack."""
    longest = [len(raw) for raw, _, _ in probes] + [len(x) for x in plain]
    longest += [len(raw) for cover in shadows.values() for raw, _ in cover]
    return max(longest, default=0) + context


def _file_holds(
    path: Path,
    probes: list[_Probe],
    plain: list[bytes],
    shadows: Shadows | None = None,
    *,
    chunk: int = _CHUNK_BYTES,
    context: int = _CONTEXT_BYTES,
) -> bool:
    shadows = shadows or {}
    margin = _margin(probes, plain, shadows, context)
    try:
        with path.open("rb", buffering=0) as fh:  # reads of a chunk: no buffer between
            for data, lo, hi, end in _windows(fh, margin, chunk):
                if _holds_name(data, probes, lo, hi, end) or any(
                    _holds_plain(data, x, shadows, lo, hi, end) for x in plain
                ):
                    return True
    except FileNotFoundError:  # gone meanwhile
        return False
    return False


def scan_home(
    home: Path,
    needles: Needles,
    *,
    kept_ids: Callable[[Sequence[str]], Iterable[str]] | None = None,
) -> list[str]:
    """Paths (relative to the home) of files whose bytes hold a needle.

    ``kept_ids(needle_ids)`` answers which ids still rightly stored contain one of them; it is
    asked only when a file holds a needle id, and those files are scanned again with each
    occurrence inside a kept id excused (the common clean case costs nothing more)."""
    probes, plain = needles._name_probes(), needles._plain()
    hits = [path for path in home_files(home) if _file_holds(path, probes, plain)]
    if hits and kept_ids is not None and plain:
        shadows = shadows_of(needles, kept_ids(needles.ids))
        if shadows:
            hits = [path for path in hits if _file_holds(path, probes, plain, shadows)]
    return [str(path.relative_to(home)) for path in hits]


# -- copies of input the product itself wrote into the home ---------------------------------

PRODUCT_INPUT_DIRS = ("demo",)  # `memctl demo` writes its generated episodes and truth here


def _names_subject(item: Any, subject_id: str, tenant_id: str | None) -> bool:
    return (
        isinstance(item, dict)
        and item.get("subject_id") == subject_id
        and (tenant_id is None or item.get("tenant_id") in (tenant_id, None))
    )


def _without(value: Any, gone: frozenset[str], subject_id: str, tenant_id: str | None) -> Any:
    if isinstance(value, list):
        return [
            _without(v, gone, subject_id, tenant_id)
            for v in value
            if not (isinstance(v, str) and v in gone)
            and not _names_subject(v, subject_id, tenant_id)
            and not (isinstance(v, dict) and v.get("episode_id") in gone)
        ]
    if isinstance(value, dict):
        return {
            k: _without(v, gone, subject_id, tenant_id) for k, v in value.items() if k not in gone
        }
    return value


def scrub_product_inputs(
    home: Path, subject_id: str, tenant_id: str | None, record_ids: Iterable[str] = ()
) -> dict[str, int]:
    """Take the subject out of the input copies the product wrote; {relative path: items}.

    JSON lines naming the subject (or, unparseable, naming it in their text) are dropped; in
    JSON documents the subject's id and its record ids leave every list, and so do its
    records. Files a user put under the home are not touched: the home scan reports them.
    """
    gone = frozenset([subject_id, *record_ids])
    needles = Needles.of([subject_id], gone)
    changed: dict[str, int] = {}
    for folder in PRODUCT_INPUT_DIRS:
        for path in sorted((home / folder).glob("*.json*")):
            raw = path.read_bytes()
            if not needles.found_in(raw):
                continue
            if path.suffix == ".jsonl":
                kept, dropped = [], 0
                for line in raw.decode("utf-8", errors="replace").splitlines():
                    try:
                        naming = _names_subject(json.loads(line), subject_id, tenant_id)
                    except ValueError:
                        naming = bool(needles.found_in(line))
                    dropped += naming
                    if not naming:
                        kept.append(line)
                text = "".join(k + "\n" for k in kept)
            else:
                doc = json.loads(raw)
                text = json.dumps(_without(doc, gone, subject_id, tenant_id), indent=2) + "\n"
                dropped = 1
            tmp = path.with_suffix(path.suffix + ".scrub")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
            changed[str(path.relative_to(home))] = dropped
    return changed
