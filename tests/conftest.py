from __future__ import annotations

pytest_plugins = [
    "tests.settings_guard",
    "localcluster.pytest_plugin",
    "tests.engine_fixtures",
    "tests.realnode_fixtures",
    "tests.browser",
]


def pytest_configure(config):
    # Settings for the whole run are written here, once, never as an override layer that a test's own
    # overrides could be stacked on and restored out of order.
    from django.conf import settings

    # The suite runs with DEBUG off (as production does) but never runs collectstatic: serve static files
    # from the source folders instead of WhiteNoise's manifest of hashed names.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    # The production hasher takes a good part of a second per password on CI machines; the tests' people
    # are props (a test of the hasher itself would set its own).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    if not settings.PORTAL_SEAL_PUBLIC_KEY:
        # Run without devtools.testenv: a pair for this run, in the environment the engine's processes get.
        import os

        from portal.sealing import generate_keypair

        public, private = generate_keypair()
        os.environ["PORTAL_SEAL_PUBLIC_KEY"], os.environ["PORTAL_SEAL_PRIVATE_KEY"] = public, private
        settings.PORTAL_SEAL_PUBLIC_KEY, settings.PORTAL_SEAL_PRIVATE_KEY = public, private


def _retry_flush_on_deadlock() -> None:
    """Transactional tests end with a TRUNCATE of every table while the engine's worker and tracker keep
    working against the same database; PostgreSQL may pick the TRUNCATE as a deadlock victim. Retry it."""
    import time

    from django.db import OperationalError
    from django.db.backends.base.operations import BaseDatabaseOperations

    original = BaseDatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        for attempt in range(10):
            try:
                return original(self, sql_list)
            except OperationalError as exc:
                if "deadlock" not in str(exc) or attempt == 9:
                    raise
                time.sleep(0.2 * (attempt + 1))
        return None

    BaseDatabaseOperations.execute_sql_flush = execute_sql_flush


_retry_flush_on_deadlock()
