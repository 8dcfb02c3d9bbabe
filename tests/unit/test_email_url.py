"""EMAIL_URL: one URL-style setting says where the portal's mail goes (portal.env.env_email)."""

from __future__ import annotations

import pytest

from portal.env import ConfigError, env_email

SMTP = "django.core.mail.backends.smtp.EmailBackend"


def test_starttls_url_with_percent_encoded_password(monkeypatch):
    monkeypatch.setenv(
        "EMAIL_URL", "smtp+tls://gpus%40example.org:p%40ss%3Aw0rd@mail.example.org?from=gpus@example.org"
    )
    assert env_email("EMAIL_URL", "console://") == {
        "EMAIL_BACKEND": SMTP,
        "EMAIL_TIMEOUT": 10,
        "EMAIL_HOST": "mail.example.org",
        "EMAIL_PORT": 587,
        "EMAIL_HOST_USER": "gpus@example.org",
        "EMAIL_HOST_PASSWORD": "p@ss:w0rd",
        "EMAIL_USE_SSL": False,
        "EMAIL_USE_TLS": True,
        "DEFAULT_FROM_EMAIL": "gpus@example.org",
    }


def test_implicit_tls_and_plain_smtp_ports(monkeypatch):
    monkeypatch.setenv("EMAIL_URL", "smtps://u:p@mail.example.org?timeout=3")
    config = env_email("EMAIL_URL", "console://")
    assert (config["EMAIL_PORT"], config["EMAIL_USE_SSL"], config["EMAIL_USE_TLS"], config["EMAIL_TIMEOUT"]) == (
        465,
        True,
        False,
        3,
    )
    monkeypatch.setenv("EMAIL_URL", "smtp://relay.internal:2525")
    config = env_email("EMAIL_URL", "console://")
    assert (config["EMAIL_HOST"], config["EMAIL_PORT"], config["EMAIL_HOST_USER"]) == ("relay.internal", 2525, "")


def test_unset_means_the_log(monkeypatch):
    monkeypatch.delenv("EMAIL_URL", raising=False)
    monkeypatch.delenv("EMAIL_URL_FILE", raising=False)
    assert env_email("EMAIL_URL", "console://")["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"


def test_url_from_a_mounted_secret_file(tmp_path, monkeypatch):
    secret = tmp_path / "email-url"
    secret.write_text("smtp+tls://portal:from-the-secret@mail.example.org\n")
    monkeypatch.setenv("EMAIL_URL_FILE", str(secret))
    assert env_email("EMAIL_URL", "console://")["EMAIL_HOST_PASSWORD"] == "from-the-secret"


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("imap://mail.example.org", "unsupported e-mail URL scheme 'imap'"),
        ("mail.example.org:587", "unsupported e-mail URL scheme"),
        ("smtp+tls://u:p@", "names no mail server"),
        ("smtp://mail.example.org:99999", "port"),
        ("smtp://mail.example.org?timeout=soon", "timeout='soon'"),
        ("smtp://mail.example.org?timeout=0", "at least 1 second"),
        ("smtp://mail.example.org?tls=1", "unknown option(s) tls"),
    ],
)
def test_bad_urls_stop_start_up_naming_the_variable(monkeypatch, url, complaint):
    monkeypatch.setenv("EMAIL_URL", url)
    with pytest.raises(ConfigError, match="EMAIL_URL") as caught:
        env_email("EMAIL_URL", "console://")
    assert complaint in str(caught.value)
    assert "p@" not in str(caught.value)  # never echo a password
