#!/usr/bin/env python
"""Django's command-line utility for GPU Portal."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    # In a source checkout with nothing configured, commands run in development mode (as `make run` and
    # `make lint` do). Deployed images carry no .git, so there a missing SECRET_KEY still stops start-up.
    configured = any(name in os.environ for name in ("DEBUG", "SECRET_KEY", "SECRET_KEY_FILE"))
    if not configured and (Path(__file__).resolve().parent / ".git").exists():
        os.environ["DEBUG"] = "1"
    from portal.env import ConfigError

    try:
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
    except ConfigError as exc:
        sys.exit(f"configuration error: {exc}")


if __name__ == "__main__":
    main()
