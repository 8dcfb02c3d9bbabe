"""Settings refuse to start in production without a secret key."""

from __future__ import annotations

import json
import os
import subprocess
import sys


def _import_settings(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE", "DEBUG"}}
    return subprocess.run(
        [sys.executable, "-c", "import portal.settings"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_secret_key_required_when_debug_off():
    result = _import_settings({"DEBUG": "0"})
    assert result.returncode != 0
    assert "SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off" in result.stderr


def test_debug_runs_without_secret_key():
    assert _import_settings({"DEBUG": "1"}).returncode == 0


def test_manage_py_names_the_missing_setting_without_a_traceback():
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "SECRET_KEY_FILE", "DEBUG"}}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        env={**clean, "DEBUG": "0"}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "configuration error: SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_tls_redis_url_configures_broker_and_cache_for_tls():
    """REDIS_URL=rediss://... works: Celery verifies the certificate, the API cache connects with TLS."""
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "from celery import current_app; from django.core.cache import caches; "
        "import portal.celery; "
        "pool = caches['api']._cache._get_connection_pool(False); "
        "c = current_app.connection_for_write(); c.transport_options; "
        "print(json.dumps([s.CELERY_BROKER_USE_SSL['ssl_cert_reqs'] == 2, pool.connection_class.__name__, "
        "c.transport.driver_name, bool(c.ssl)]))"
    )
    clean = {k: v for k, v in os.environ.items() if k not in {"CELERY_BROKER_URL"}}
    env = {**clean, "DEBUG": "1", "REDIS_URL": "rediss://:pw@redis.example.internal:6380/0",
           "DJANGO_SETTINGS_MODULE": "portal.settings"}  # fmt: skip
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == '[true, "SSLConnection", "redis", true]'


def _security_settings(env: dict[str, str]) -> dict:
    script = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({k: getattr(s, k) for k in ('SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', "
        "'SECURE_HSTS_SECONDS', 'SECURE_HSTS_INCLUDE_SUBDOMAINS', 'SECURE_HSTS_PRELOAD')}))"
    )
    clean = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECURE_COOKIES", "HSTS_SECONDS"}}
    full = {**clean, "DJANGO_SETTINGS_MODULE": "portal.settings", "SECRET_KEY": "k" * 60, **env}
    result = subprocess.run([sys.executable, "-c", script], env=full, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_with_debug_off_cookies_are_secure_and_hsts_is_on_by_default():
    assert _security_settings({"DEBUG": "0"}) == {
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 365 * 86400,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
        "SECURE_HSTS_PRELOAD": True,
    }


def test_plain_http_trials_opt_out_of_secure_cookies_and_hsts_together():
    found = _security_settings({"DEBUG": "0", "SECURE_COOKIES": "0"})
    assert (found["SESSION_COOKIE_SECURE"], found["CSRF_COOKIE_SECURE"], found["SECURE_HSTS_SECONDS"]) == (
        False,
        False,
        0,
    )


def test_debug_runs_keep_cookies_plain_and_no_hsts():
    found = _security_settings({"DEBUG": "1"})
    assert (found["SESSION_COOKIE_SECURE"], found["SECURE_HSTS_SECONDS"]) == (False, 0)


def _without_redis(**extra: str) -> dict[str, str]:
    drop = {"SECRET_KEY", "SECRET_KEY_FILE", "DEBUG", "REDIS_URL", "CELERY_BROKER_URL"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def test_no_redis_url_never_means_the_machines_redis_on_6379():
    """Issue 32: with no REDIS_URL every portal on a machine took redis://127.0.0.1:6379/0 as its broker,
    and their workers ran each other's tasks. Production refuses to start; DEBUG has no broker at all."""
    production = subprocess.run(
        [sys.executable, "-c", "import portal.settings"],
        env=_without_redis(DEBUG="0", SECRET_KEY="x" * 50), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert production.returncode != 0
    assert "REDIS_URL (or CELERY_BROKER_URL) must be set" in production.stderr
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.CELERY_BROKER_URL, s.CACHES['api']['BACKEND']]))"
    )
    debug = subprocess.run(
        [sys.executable, "-c", script],
        env=_without_redis(DEBUG="1", DJANGO_SETTINGS_MODULE="portal.settings"),
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert debug.returncode == 0, debug.stderr
    broker, cache = json.loads(debug.stdout.strip().splitlines()[-1])
    assert "6379" not in broker or ".invalid" in broker
    assert "127.0.0.1" not in broker
    assert cache.endswith("LocMemCache")


def test_a_worker_without_a_broker_of_its_own_refuses_to_start_saying_why():
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "-l", "warning"],
        env=_without_redis(DEBUG="1"), capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "GPU Portal worker cannot start: set REDIS_URL" in result.stdout + result.stderr


def test_a_mail_printed_by_the_console_backend_in_a_worker_is_not_logged_as_a_warning(caplog):
    """`make run` prints mail (EMAIL_URL console://) from the Celery worker, whose stdout Celery turns
    into log records: every notification read `WARNING/ForkPoolWorker` in the log. Printing is INFO."""
    import logging

    from celery.utils.log import LoggingProxy, get_logger
    from django.core.mail import EmailMessage
    from django.core.mail.backends.console import EmailBackend

    from portal.celery import app

    logger = get_logger("celery.redirected")
    proxy = LoggingProxy(logger, loglevel=app.conf.worker_redirect_stdouts_level)
    with caplog.at_level(logging.DEBUG, logger="celery.redirected"):
        EmailBackend(stream=proxy).send_messages([EmailMessage("first succeeded", "body", to=["alice@example.org"])])
    records = [r for r in caplog.records if r.name == "celery.redirected"]
    assert records
    assert all(r.levelno == logging.INFO for r in records), {r.levelname for r in records}
