"""Fuzzing what users hand memctl: ingest lines, config files and MEMCTL_ overrides.

Whatever the input, a command either succeeds or exits non-zero with exactly one line on
stderr (``Error: ...``) and no traceback (DESIGN.md section 5, issue 18). Through ``main()``,
in-process: the entry point the ``memctl`` script runs, so the exit codes and stderr are the
ones users see. Example counts are small (seconds); the edge cases found once are pinned with
``@example``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memory_core.config import Settings
from tests.conftest import episode

FUZZ = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def memctl(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    from memory_core.cli import main

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        with monkeypatch.context() as m:
            for key, value in (env or {}).items():
                m.setenv(key, value)
            m.setattr(sys, "argv", ["memctl", *args])
            code = 0
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run


def _one_line_or_success(out: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in out.stderr, out.stderr
    if out.returncode == 0:
        json.loads(out.stdout)  # --format json: one JSON document
        return
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("Error: "), out.stderr


# --- ingest lines ---------------------------------------------------------------------------

_WEIRD_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]) | st.sampled_from("\x00\x1b\n\r\u2028"),
    max_size=12,
)
_WEIRD_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _WEIRD_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_WEIRD_TEXT, inner, max_size=3),
    max_leaves=6,
)
_FIELDS = [*episode().keys(), "vector", "recorded_at", "expires_at", "claims", "sources"]


@st.composite
def _line(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["good", "field", "bytes", "deep", "vector", "cut"]))
    record: dict[str, Any] = episode(episode_id=draw(st.sampled_from(["e1", "e2", "e3"])))
    if kind == "field":
        record[draw(st.sampled_from(_FIELDS))] = draw(_WEIRD_VALUE)
    if kind == "vector":
        value = draw(st.floats(allow_nan=True, allow_infinity=True, width=64))
        record["vector"] = [value] + [draw(st.sampled_from([0.0, 0.1, 1e39]))] * 383
    line = json.dumps(record, ensure_ascii=draw(st.booleans())).encode()
    if kind == "bytes":
        at = draw(st.integers(0, len(line)))
        line = line[:at] + draw(st.binary(min_size=1, max_size=4)) + line[at:]
    if kind == "deep":
        depth = draw(st.sampled_from([10, 300, 5_000]))
        line = (
            b"[" * depth + b"]" * depth
            if draw(st.booleans())
            else b'{"a":' * depth + b"1" + b"}" * depth
        )
    if kind == "cut":
        line = line[: draw(st.integers(0, len(line)))]
    return line


@FUZZ
@given(lines=st.lists(_line(), min_size=1, max_size=4), quarantine=st.booleans())
@example(lines=[json.dumps(episode()).encode(), b"[" * 10_000 + b"]" * 10_000], quarantine=True)
@example(lines=[json.dumps(episode()).encode(), b'{"episode_id": "e\xff"}'], quarantine=False)
@example(lines=[json.dumps(episode(subject_id="a\x00b")).encode()], quarantine=False)
@example(lines=[json.dumps(episode(conditions={"a\x1cb": 1})).encode()], quarantine=False)
def test_ingest_any_lines_succeeds_or_fails_in_one_line(tmp_path, memctl, lines, quarantine):
    home = tmp_path / "home"
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    args = ["ingest", str(path), "--home", str(home), "--format", "json"]
    out = memctl(*args, *(["--quarantine"] if quarantine else []))
    _one_line_or_success(out)
    if out.returncode == 0 and not quarantine:
        assert json.loads(out.stdout)["errors"] == []


# --- config files and environment overrides ---------------------------------------------------

# keys that would reach the network or load a model are left out: stores, embed.model, home
_SECTIONS = {
    name: sorted(info.annotation.model_fields)
    for name, info in Settings.model_fields.items()
    if name not in {"stores", "home", "embed"} and hasattr(info.annotation, "model_fields")
}
_TOML_VALUE = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["inf", "nan", "-1", "0", "true", "[]", '["low"]', '"0 2 * * *"', '"x"',
                     '{a = -1}', '"* * * * * *"', '"secret"', "[[1]]", '"\\u0000"']),
)  # fmt: skip
_ENV_NAMES = st.one_of(
    st.sampled_from(
        [f"MEMCTL_{s.upper()}__{k.upper()}" for s, keys in _SECTIONS.items() for k in keys]
    ),
    st.from_regex(r"MEMCTL_[A-Z_]{1,12}", fullmatch=True),
)
_ENV_VALUE = st.one_of(
    st.sampled_from(["-1", "0", "secret", '["secret"]', "[", "{}", "nan", "61 * * * *", "1e999"]),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\x00"),
            max_size=10),
)  # fmt: skip


@st.composite
def _toml(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 5)) == 0:  # not even TOML
        return draw(st.binary(max_size=40))
    out = []
    for section in draw(st.lists(st.sampled_from(sorted(_SECTIONS)), max_size=3, unique=True)):
        out.append(f"[{section}]")
        keys = draw(st.lists(st.sampled_from([*_SECTIONS[section], "nope"]), max_size=3,
                             unique=True))  # fmt: skip
        out += [f"{key} = {draw(_TOML_VALUE)}" for key in keys]
    text = "\n".join(out).encode()
    if draw(st.booleans()):
        text += draw(st.sampled_from([b"\n# caf\xe9\n", b"\nx = " + b"[" * 3000, b"\n[", b""]))
    return text


@FUZZ
@given(toml=_toml(), env=st.dictionaries(_ENV_NAMES, _ENV_VALUE, max_size=3))
@example(toml=b"[forget]\n# caf\xe9\n", env={})
@example(toml=b"", env={"MEMCTL_RECALL__ALLOWED_SENSITIVITY": "secret"})
@example(toml=b"", env={"MEMCTL_FOO__BAR": "1"})
@example(toml=b'[schedule]\nnightly_cron = "61 * * * *"\n', env={})
def test_any_config_and_env_succeed_or_fail_in_one_line(tmp_path, memctl, toml, env):
    path = tmp_path / "c.toml"
    path.write_bytes(toml)
    out = memctl("status", "--home", str(tmp_path / "home"), "--config", str(path),
                 "--format", "json", env=env)  # fmt: skip
    _one_line_or_success(out)


def test_fuzz_env_is_clean():
    """The autouse fixture leaves only the hash embedder set: the fuzz starts from defaults."""
    assert {k for k in os.environ if k.startswith("MEMCTL_")} == {"MEMCTL_EMBED__MODEL"}
    assert Path(__file__).name.startswith("test_")
