from __future__ import annotations

pytest_plugins = ["localcluster.pytest_plugin", "tests.engine_fixtures"]
