"""Sealing (portal/sealing.py): what the web seals only the engine's private key opens; keys and their
settings are checked at start, naming the variable; the web and the worker refuse to start without theirs."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from portal import sealing
from portal.env import ConfigError
from portal.sealing import env_seal_keys

VALUE = "hf_live_4bd0c1-do-not-leak"
SEAL_VARIABLES = {
    "PORTAL_SEAL_PUBLIC_KEY",
    "PORTAL_SEAL_PRIVATE_KEY",
    "PORTAL_SEAL_PUBLIC_KEY_FILE",
    "PORTAL_SEAL_PRIVATE_KEY_FILE",
}


@pytest.fixture
def pair() -> tuple[str, str]:
    return sealing.generate_keypair()


def test_only_the_private_half_opens_what_the_public_half_sealed(pair):
    public, private = pair
    sealed = sealing.seal(VALUE, public_key=public)
    assert sealed.startswith(sealing.PREFIX)
    assert VALUE not in sealed
    assert base64.b64encode(VALUE.encode()).decode() not in sealed
    assert sealing.unseal(sealed, private_key=private) == VALUE
    # A fresh ephemeral key each time: the same value never seals to the same text.
    assert sealing.seal(VALUE, public_key=public) != sealed
    # The public half cannot open it, nor can another pair's private half.
    _, other_private = sealing.generate_keypair()
    with pytest.raises(sealing.SealError, match="sealed to another key"):
        sealing.unseal(sealed, private_key=other_private)


def test_any_change_to_a_sealed_value_is_refused(pair):
    public, private = pair
    sealed = sealing.seal(VALUE, public_key=public)
    raw = bytearray(base64.b64decode(sealed[len(sealing.PREFIX) :]))
    raw[-1] ^= 1
    tampered = sealing.PREFIX + base64.b64encode(bytes(raw)).decode()
    with pytest.raises(sealing.SealError):
        sealing.unseal(tampered, private_key=private)
    for broken in (VALUE, sealing.PREFIX + "not base64!", sealing.PREFIX, ""):
        with pytest.raises(sealing.SealError):
            sealing.unseal(broken, private_key=private)


def test_unicode_and_large_values_survive(pair):
    public, private = pair
    value = "clé-秘密-🔑\n" * 4000
    assert sealing.unseal(sealing.seal(value, public_key=public), private_key=private) == value


def test_without_keys_nothing_is_sealed_or_opened(settings, pair):
    settings.PORTAL_SEAL_PUBLIC_KEY = ""
    settings.PORTAL_SEAL_PRIVATE_KEY = ""
    with pytest.raises(sealing.SealError, match="PORTAL_SEAL_PUBLIC_KEY is not set"):
        sealing.seal(VALUE)
    sealed = sealing.seal(VALUE, public_key=pair[0])
    with pytest.raises(sealing.SealError, match="holds no PORTAL_SEAL_PRIVATE_KEY"):
        sealing.unseal(sealed)
    with pytest.raises(ConfigError, match="PORTAL_SEAL_PUBLIC_KEY is not set"):
        sealing.require_public_key()
    with pytest.raises(ConfigError, match=r"PORTAL_SEAL_PRIVATE_KEY .* is not set"):
        sealing.require_private_key()


def test_settings_use_the_configured_pair(settings, pair):
    settings.PORTAL_SEAL_PUBLIC_KEY, settings.PORTAL_SEAL_PRIVATE_KEY = pair
    assert sealing.unseal(sealing.seal(VALUE)) == VALUE


@pytest.fixture
def seal_env(monkeypatch):
    for name in SEAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_env_seal_keys_checks_and_derives(seal_env, pair, tmp_path):
    public, private = pair
    assert env_seal_keys() == ("", "")
    seal_env.setenv("PORTAL_SEAL_PUBLIC_KEY", public)
    assert env_seal_keys() == (public, "")
    # The worker, given only its private key (as a mounted file), knows the public half.
    seal_env.delenv("PORTAL_SEAL_PUBLIC_KEY")
    key_file = tmp_path / "private"
    key_file.write_text(private + "\n")
    seal_env.setenv("PORTAL_SEAL_PRIVATE_KEY_FILE", str(key_file))
    assert env_seal_keys() == (public, private)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("PORTAL_SEAL_PUBLIC_KEY", "not-a-key"),
        ("PORTAL_SEAL_PUBLIC_KEY", base64.b64encode(b"x" * 31).decode()),
        ("PORTAL_SEAL_PRIVATE_KEY", "c2hvcnQ="),
    ],
)
def test_a_malformed_key_names_the_variable(seal_env, variable, value):
    seal_env.setenv(variable, value)
    with pytest.raises(ConfigError, match=f"{variable} is not a key: expected 32 bytes"):
        env_seal_keys()


def test_a_public_key_of_another_pair_stops_the_start(seal_env, pair):
    seal_env.setenv("PORTAL_SEAL_PUBLIC_KEY", sealing.generate_keypair()[0])
    seal_env.setenv("PORTAL_SEAL_PRIVATE_KEY", pair[1])
    with pytest.raises(ConfigError, match="not the public half of PORTAL_SEAL_PRIVATE_KEY"):
        env_seal_keys()


def test_seal_keypair_prints_a_working_pair_and_never_overwrites_a_key_file(tmp_path):
    out = StringIO()
    call_command("seal_keypair", stdout=out)
    lines = dict(line.split("=", 1) for line in out.getvalue().split())
    public, private = lines["PORTAL_SEAL_PUBLIC_KEY"], lines["PORTAL_SEAL_PRIVATE_KEY"]
    assert sealing.unseal(sealing.seal(VALUE, public_key=public), private_key=private) == VALUE

    path = tmp_path / "seal.key"
    out = StringIO()
    call_command("seal_keypair", private_key_file=path, stdout=out)
    assert "PORTAL_SEAL_PRIVATE_KEY=" not in out.getvalue()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    public = out.getvalue().split("PORTAL_SEAL_PUBLIC_KEY=")[1].split()[0]
    assert sealing.public_half(path.read_text().strip()) == public
    with pytest.raises(CommandError, match="never overwritten"):
        call_command("seal_keypair", private_key_file=path, stdout=StringIO())


def _without_keys() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SEAL_VARIABLES}
    return {**env, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "portal.settings"}


def test_the_web_refuses_to_start_without_the_public_key():
    result = subprocess.run(
        [sys.executable, "-c", "import portal.wsgi"], env=_without_keys(), capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "PORTAL_SEAL_PUBLIC_KEY is not set" in result.stderr


def test_the_engine_worker_refuses_to_start_without_the_private_key():
    # Before it connects anywhere (the broker address here is closed): it stops, saying why.
    env = {**_without_keys(), "REDIS_URL": "redis://127.0.0.1:9/0", "CELERY_BROKER_URL": "redis://127.0.0.1:9/0"}
    argv = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "--without-mingle"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode != 0
    assert "GPU Portal worker cannot start: PORTAL_SEAL_PRIVATE_KEY" in result.stderr
