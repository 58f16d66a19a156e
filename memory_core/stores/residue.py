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
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

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


def _holds_name(data: bytes | mmap.mmap, probes: list[_Probe]) -> bool:
    """Whether a name pattern matches in ``data``: the same answer as ``pattern.search``.

    Why: a pattern that opens with a lookbehind defeats ``re``'s literal-prefix search and
    crawled at ~17 MB/s over Lance data files (the byte scan cost more than the deletion it
    verifies); ``find`` locates the literal at memory speed and the pattern is tried only where
    a match could start (at the literal, or at the quote right before it)."""
    for raw, pattern, back in probes:
        pos = data.find(raw)
        while pos >= 0:
            if pos >= back and pattern.match(data, pos - back):
                return True
            pos = data.find(raw, pos + 1)
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


def _holds_plain(data: bytes | mmap.mmap, needle: bytes, shadows: Shadows) -> bool:
    """Whether ``needle`` occurs in ``data`` other than inside a kept id that contains it."""
    cover = shadows.get(needle)
    pos = data.find(needle)
    while pos >= 0:
        if not cover or not any(
            pos >= at and data[pos - at : pos - at + len(raw)] == raw for raw, at in cover
        ):
            return True
        pos = data.find(needle, pos + 1)
    return False


def _file_holds(
    path: Path, probes: list[_Probe], plain: list[bytes], shadows: Shadows | None = None
) -> bool:
    try:
        with path.open("rb") as fh:
            if path.stat().st_size == 0:
                return False
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _holds_name(data, probes) or any(
                    _holds_plain(data, x, shadows or {}) for x in plain
                )
    except (FileNotFoundError, ValueError):  # gone meanwhile, or emptied
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
