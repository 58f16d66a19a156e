"""Checking a cron expression before anything schedules it.

``[schedule]`` crons end up in ``prefect.yaml`` and in ``memctl serve``'s deployments; an
invalid one used to be written there and fail only when Prefect read it back. memory_core does
not import Prefect, so this is a small strict parser of the classic five fields: it accepts a
subset of what Prefect's (vendored croniter) validator accepts, never more
(tests/test_config.py compares the two), and says which field is wrong.

Accepted: ``*``, numbers, ranges ``a-b``, steps ``*/n`` and ``a-b/n``, lists ``a,b``, month
and weekday names (``jan``, ``mon``), weekday 7 = Sunday, and the macros ``@yearly``,
``@annually``, ``@monthly``, ``@weekly``, ``@daily``, ``@midnight``, ``@hourly``. Refused:
seconds or year fields, croniter's extensions (``L``, ``W``, ``#``, ``?``, random ``R`` and
hashed ``H``), which Prefect refuses in part and which a reader would have to look up.
"""

from __future__ import annotations

import re

__all__ = ["check_cron"]

_MACROS = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names mapped to numbers)
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i + 1 for i, m in enumerate(_MONTHS)}),
    ("day of week", 0, 7, {d: i for i, d in enumerate(_DAYS)}),
)
_ITEM = re.compile(r"^(?:(\*)|([0-9a-z]+)(?:-([0-9a-z]+))?)(?:/([0-9]+))?$")


def _value(token: str, field: str, low: int, high: int, names: dict[str, int]) -> int:
    if token.isdigit():
        number = int(token)
    elif token in names:
        number = names[token]
    else:
        msg = f"{field}: {token!r} is not a number" + (
            f" or a name ({', '.join(names)})" if names else ""
        )
        raise ValueError(msg)
    if not low <= number <= high:
        msg = f"{field}: {number} is outside {low}-{high}"
        raise ValueError(msg)
    return number


def _check_field(text: str, field: str, low: int, high: int, names: dict[str, int]) -> None:
    for item in text.split(","):
        match = _ITEM.match(item)
        if match is None:
            msg = f"{field}: {item!r} is not *, a number, a range a-b or a step */n"
            raise ValueError(msg)
        star, first, last, step = match.groups()
        if step is not None and int(step) == 0:
            msg = f"{field}: step 0 in {item!r}"
            raise ValueError(msg)
        if star:
            continue
        start = _value(first, field, low, high, names)
        if last is not None:
            end = _value(last, field, low, high, names)
            if end < start:
                msg = f"{field}: range {item!r} runs backwards"
                raise ValueError(msg)


def check_cron(expression: str) -> str:
    """``expression`` if it is a valid five-field cron (or a macro); else ValueError naming
    the field that is wrong."""
    text = expression.strip().lower()
    if text in _MACROS:
        return expression
    parts = text.split()
    if len(parts) != len(_FIELDS):
        msg = (
            f"{expression!r} has {len(parts)} fields; a cron has 5: "
            "minute hour day-of-month month day-of-week (e.g. '0 2 * * *')"
        )
        raise ValueError(msg)
    for part, (field, low, high, names) in zip(parts, _FIELDS, strict=True):
        _check_field(part, field, low, high, names)
    return expression
