"""Configuration: defaults equal configs/default.toml; env beats file; bad keys fail at start."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from memory_core.config import Settings, load_settings
from memory_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_default_toml_matches_builtin_defaults(monkeypatch):
    monkeypatch.delenv("MEMCTL_EMBED__MODEL")
    from_file = load_settings(config_file=ROOT / "configs/default.toml")
    assert from_file.model_dump() == Settings().model_dump()
    # and every built-in section/key is documented in the file
    doc = tomllib.loads((ROOT / "configs/default.toml").read_text())
    for section, values in Settings().model_dump().items():
        if isinstance(values, dict):
            assert set(values) <= set(doc[section]), section


def test_production_example_points_lance_at_object_store():
    settings = load_settings(config_file=ROOT / "configs/production.example.toml")
    assert settings.lance_uri.startswith("s3://")


def test_env_overrides_file(tmp_path, monkeypatch):
    path = tmp_path / "c.toml"
    path.write_text("[cluster]\nthreshold = 0.2\nseed = 4\n")
    monkeypatch.setenv("MEMCTL_CLUSTER__THRESHOLD", "0.3")
    settings = load_settings(config_file=path)
    assert settings.cluster.threshold == 0.3
    assert settings.cluster.seed == 4


def test_home_option_sets_store_paths(tmp_path):
    settings = load_settings(home=tmp_path / "h")
    assert settings.lance_uri == str(tmp_path / "h" / "lance")
    assert settings.meta_path == tmp_path / "h" / "meta.duckdb"


@pytest.mark.parametrize(
    ("env", "value", "key"),
    [
        ("MEMCTL_CLUSTER__THRESHOLD", "-1", "cluster.threshold"),
        ("MEMCTL_EMBED__MODEL", "word2vec", "embed.model"),
        ("MEMCTL_POLICY__MIN_SUPPORT", "many", "policy.min_support"),
        ("MEMCTL_TIMEZONE", "Mars/Olympus", "timezone"),
    ],
)
def test_invalid_env_value_names_the_key(monkeypatch, env, value, key):
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.key == key
    assert key in str(info.value)


def test_unknown_key_in_file_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[cluster]\nthreshhold = 0.2\n")
    with pytest.raises(ConfigError) as info:
        load_settings(config_file=path)
    assert "cluster.threshhold" in str(info.value)


def test_broken_toml_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[cluster\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(config_file=path)
