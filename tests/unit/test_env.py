"""The environment readers that every setting goes through."""

from __future__ import annotations

import pytest

from portal.env import ConfigError, env_bool, env_database, env_int, env_list, env_str


def test_env_str_reads_secret_from_file(tmp_path, monkeypatch):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("SECRET_KEY_FILE", str(secret))
    monkeypatch.setenv("SECRET_KEY", "ignored-when-a-file-is-given")
    assert env_str("SECRET_KEY") == "s3cret"


def test_env_str_names_unreadable_file(monkeypatch):
    monkeypatch.setenv("SECRET_KEY_FILE", "/nonexistent/secret")
    with pytest.raises(ConfigError, match="SECRET_KEY_FILE"):
        env_str("SECRET_KEY")


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False)])
def test_env_bool_accepts_common_spellings(monkeypatch, raw, expected):
    monkeypatch.setenv("FLAG", raw)
    assert env_bool("FLAG") is expected


def test_env_bool_refuses_garbage_naming_the_variable(monkeypatch):
    monkeypatch.setenv("FLAG", "maybe")
    with pytest.raises(ConfigError, match="FLAG='maybe'"):
        env_bool("FLAG")


def test_env_int_bounds(monkeypatch):
    monkeypatch.setenv("WORKERS", "0")
    with pytest.raises(ConfigError, match="WORKERS=0 is below the minimum 1"):
        env_int("WORKERS", 4, minimum=1)
    monkeypatch.setenv("WORKERS", "many")
    with pytest.raises(ConfigError, match="not an integer"):
        env_int("WORKERS", 4)
    monkeypatch.delenv("WORKERS")
    assert env_int("WORKERS", 4) == 4


def test_env_list_splits_and_trims(monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", " portal.example.org, ,localhost ")
    assert env_list("ALLOWED_HOSTS") == ["portal.example.org", "localhost"]


def test_env_database_parses_postgres_and_sqlite(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://portal:pw@db.example:5433/gpu")
    config = env_database("DATABASE_URL", "sqlite:///x.sqlite3")
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("db.example", 5433, "gpu")
    monkeypatch.delenv("DATABASE_URL")
    assert env_database("DATABASE_URL", "sqlite:////tmp/x.sqlite3")["ENGINE"] == "django.db.backends.sqlite3"


def test_env_database_refuses_unknown_scheme(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "oracle2://nope")
    with pytest.raises(ConfigError, match="DATABASE_URL"):
        env_database("DATABASE_URL", "sqlite:///x")
