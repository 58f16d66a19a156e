"""Configuration: defaults equal configs/default.toml; env beats file; bad keys fail at start."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# --- issue 18: values that used to corrupt or lose data, and one-line errors ---------------


def test_purpose_ttl_must_be_positive(tmp_path):
    path = tmp_path / "c.toml"
    for value in ("-1", "0"):
        path.write_text(f"[forget]\npurpose_ttl_days = {{ads = {value}}}\n")
        with pytest.raises(ConfigError) as info:
            load_settings(config_file=path)
        assert info.value.key == "forget.purpose_ttl_days.ads"
        assert "greater than 0" in info.value.reason
    path.write_text("[forget]\npurpose_ttl_days = {ads = 0.5}\n")
    assert load_settings(config_file=path).forget.purpose_ttl_days == {"ads": 0.5}


@pytest.mark.parametrize(
    ("cron", "reason"),
    [
        ("61 * * * *", "minute: 61 is outside 0-59"),
        ("0 2 * *", "has 4 fields"),
        ("0 2 * * * *", "has 6 fields"),
        ("0 25 * * *", "hour: 25 is outside 0-23"),
        ("0 2 0 * *", "day of month: 0 is outside 1-31"),
        ("0 2 * 13 *", "month: 13 is outside 1-12"),
        ("0 2 * * 8", "day of week: 8 is outside 0-7"),
        ("*/0 * * * *", "step 0"),
        ("0 2 * * mon-xyz", "'xyz' is not a number"),
        ("0 5-2 * * *", "runs backwards"),
        ("H 2 * * *", "'h' is not a number"),
        ("0 2 L * *", "'l' is not a number"),
        ("every night", "has 2 fields"),
        ("", "has 0 fields"),
    ],
)
def test_invalid_cron_is_refused_naming_the_field(monkeypatch, cron, reason):
    monkeypatch.setenv("MEMCTL_SCHEDULE__REVIEW_CRON", cron)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.key == "schedule.review_cron"
    assert reason in info.value.reason
    assert "(from MEMCTL_SCHEDULE__REVIEW_CRON)" in info.value.reason


VALID_CRONS = [
    "0 2 * * *", "30 3 * * *", "*/15 * * * *", "0 8 * * 1-5", "0 0 1 jan *", "5,35 */2 * * sun",
    "0 0 * * 7", "0-30/10 1-5 1,15 1-12/3 mon-fri", "@daily", "@hourly", "@weekly", "@MONTHLY",
]  # fmt: skip


@pytest.mark.parametrize("cron", VALID_CRONS)
def test_valid_crons_pass_here_and_in_prefect(cron):
    from prefect._internal.schemas.validators import validate_cron_string

    from memory_core.cron import check_cron

    assert check_cron(cron) == cron
    assert validate_cron_string(cron) == cron  # never stricter than Prefect would be


@given(
    st.lists(
        st.one_of(
            st.sampled_from(["*", "*/5", "1-5", "mon", "jan", "0", "59", "7", "1,2", "L", "?"]),
            st.integers(-2, 70).map(str),
            st.text("0123456789*/,-", min_size=1, max_size=6),
        ),
        min_size=1,
        max_size=6,
    )
)
@settings(max_examples=150, deadline=None)
def test_what_check_cron_accepts_prefect_accepts(fields):
    """A subset of Prefect's language: a cron we let into prefect.yaml never fails there."""
    from prefect._internal.schemas.validators import validate_cron_string

    from memory_core.cron import check_cron

    text = " ".join(fields)
    try:
        check_cron(text)
    except ValueError:
        return
    validate_cron_string(text)


def test_unknown_memctl_variable_is_reported(monkeypatch):
    monkeypatch.setenv("MEMCTL_FOO__BAR", "1")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.key == "MEMCTL_FOO__BAR"
    assert "no setting reads this variable" in str(info.value)
    monkeypatch.delenv("MEMCTL_FOO__BAR")
    monkeypatch.setenv("MEMCTL_EMBED__MDOEL", "hash")  # a typo names the key it meant
    with pytest.raises(ConfigError, match="did you mean MEMCTL_EMBED__MODEL"):
        load_settings()


def test_known_non_setting_and_open_table_variables_pass(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMCTL_LOG_FORMAT", "text")
    monkeypatch.setenv("MEMCTL_KILL_AT", "nowhere#1")
    monkeypatch.setenv("MEMCTL_STORES__STORAGE_OPTIONS__REGION", "eu-west-1")
    monkeypatch.setenv("MEMCTL_FORGET__PURPOSE_TTL_DAYS__ADS", "3")
    settings = load_settings(home=tmp_path)
    assert settings.stores.storage_options == {"region": "eu-west-1"}
    assert settings.forget.purpose_ttl_days == {"ads": 3.0}


def test_env_list_that_is_not_json_names_the_variable(monkeypatch):
    monkeypatch.setenv("MEMCTL_RECALL__ALLOWED_SENSITIVITY", "secret")
    monkeypatch.setenv("MEMCTL_RECALL__DEFAULT_K", "5")  # plain values are not JSON: no suspect
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.key == "MEMCTL_RECALL__ALLOWED_SENSITIVITY"
    assert "'secret' is not valid JSON" in info.value.reason
    monkeypatch.setenv("MEMCTL_RECALL__ALLOWED_SENSITIVITY", '["secret"]')
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert info.value.key == "recall.allowed_sensitivity.0"


def test_config_file_that_is_not_utf8_or_nested_too_deep(tmp_path):
    path = tmp_path / "c.toml"
    path.write_bytes(b"[forget]\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text .* at byte 14, line 2"):
        load_settings(config_file=path)
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_settings(config_file=path)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_settings(config_file=tmp_path)  # a directory
