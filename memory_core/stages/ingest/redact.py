"""The write gate's secret redaction: secrets are replaced before anything is stored or logged.

One combined pattern screens each record first (most records hold no secret, and ingest must
stay fast); only records that match pay for the per-kind substitution. Card numbers must pass
the Luhn check, so order numbers and timestamps are left alone.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

__all__ = ["SECRET_KINDS", "Redactor", "might_hold_secret", "redact_text"]


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
            re.DOTALL,
        ),
    ),
    ("bearer_token", re.compile(r"(?i:\bbearer)\s+[A-Za-z0-9\-._~+/]{12,}=*")),
    ("api_key", re.compile(r"\bsk-(?:ant-)?[A-Za-z0-9_\-]{20,}")),
    ("api_key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
    ("api_key", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("api_key", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("api_key", re.compile(r"\bAIza[0-9A-Za-z\-_]{35}\b")),
    (
        "url_password",
        re.compile(r"(?P<pre>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]+:)(?P<pw>[^\s@/]+)(?=@)"),
    ),
    (
        "password",
        re.compile(
            r"(?P<pre>\b(?i:password|passwd|pwd|secret|api[_-]?key|access[_-]?token)"
            r"\s*[:=]\s*)(?P<pw>[^\s,;\"']{4,})"
        ),
    ),
    ("card_number", re.compile(r"(?<![\d.])(?:\d[ \-]?){12,18}\d(?!\d|\.\d)")),
]

_SCREEN = re.compile(
    "|".join(f"(?:{re.sub(r'[(][?]P<[a-z]+>', '(?:', p.pattern)})" for _, p in _PATTERNS),
    re.DOTALL,
)

SECRET_KINDS = tuple(sorted({kind for kind, _ in _PATTERNS}))

# The screen, fast: each pattern needs a literal (ASCII text only), and only a pattern whose
# literal is present is searched. Python's ``re`` tries ``_SCREEN``'s 10-way alternation at
# every position (~200 ns/char); the ``in`` tests are memchr-fast. Exact, not a heuristic:
# tests/stages/ingest/test_ingest_fast.py checks
# ``might_hold_secret(t) == bool(_SCREEN.search(t))``.
(_PRIVATE_KEY, _BEARER, _SK, _AWS, _GITHUB, _SLACK, _GOOGLE, _URL_PW, _PASSWORD, _CARD) = (
    p for _, p in _PATTERNS
)
# password needs one of these words, then optional spaces, then ':' or '='
_PASSWORD_WORDS = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "apikey",
    "api_key",
    "api-key",
    "accesstoken",
    "access_token",
    "access-token",
)
# card_number needs 13+ digits, each pair apart by at most one ' ' or '-': deleting those and
# mapping digits to '0' (everything else to 'x') leaves a run of 13 '0's.
_DIGITS = bytes(48 if 48 <= c <= 57 else 120 for c in range(256))
_CARD_RUN = b"0" * 13


def _password_hint(text: str, lower: str) -> bool:
    """Some ':' or '=' comes right after a password word (and optional whitespace)."""
    seen = 0
    for sep in ":=":
        at = text.find(sep)
        while at >= 0:
            seen += 1
            if seen > 32 or lower[:at].rstrip().endswith(_PASSWORD_WORDS):
                return True
            at = text.find(sep, at + 1)
    return False


def might_hold_secret(text: str) -> bool:
    """True when ``text`` matches a secret pattern (exactly ``_SCREEN.search``), fast."""
    if not text.isascii():
        return _SCREEN.search(text) is not None
    t = text
    if "-----BEGIN " in t and _PRIVATE_KEY.search(t):
        return True
    if "sk-" in t and _SK.search(t):
        return True
    if ("AKIA" in t or "ASIA" in t) and _AWS.search(t):
        return True
    if "_" in t and ("gh" in t or "github_pat_" in t) and _GITHUB.search(t):
        return True
    if "xox" in t and _SLACK.search(t):
        return True
    if "AIza" in t and _GOOGLE.search(t):
        return True
    if "://" in t and "@" in t and _URL_PW.search(t):
        return True
    if _CARD_RUN in t.encode().translate(_DIGITS, b" -") and _CARD.search(t):
        return True
    lower = t.lower()
    if "bearer" in lower and _BEARER.search(t):
        return True
    return ("=" in t or ":" in t) and _password_hint(t, lower) and bool(_PASSWORD.search(t))


def _replacer(kind: str, counts: Counter[str]) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        if kind == "card_number":
            digits = re.sub(r"\D", "", match.group(0))
            if not 13 <= len(digits) <= 19 or not _luhn_ok(digits):
                return match.group(0)
        counts[kind] += 1
        if "pw" in match.groupdict():
            return f"{match.group('pre')}[REDACTED:{kind}]"
        return f"[REDACTED:{kind}]"

    return replace


def redact_text(text: str, counts: Counter[str] | None = None) -> str:
    """Replace every secret in ``text``; add what was found to ``counts`` by kind."""
    if not might_hold_secret(text):
        return text
    counts = Counter() if counts is None else counts
    for kind, pattern in _PATTERNS:
        text = pattern.sub(_replacer(kind, counts), text)
    return text


class Redactor:
    """Redacts every string inside nested JSON-like values, counting by kind."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def value(self, value: object) -> object:
        if isinstance(value, str):
            return redact_text(value, self.counts)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value

    def screen(self, *texts: str) -> bool:
        """True when any text might hold a secret (cheap; decides whether to redact)."""
        return any(might_hold_secret(t) for t in texts if t)
