from __future__ import annotations

pytest_plugins = ["localcluster.pytest_plugin", "tests.engine_fixtures"]


def pytest_configure(config):
    # The suite runs with DEBUG off (as production does) but never runs collectstatic: serve static files
    # from the source folders instead of WhiteNoise's manifest of hashed names.
    from django.conf import settings

    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
