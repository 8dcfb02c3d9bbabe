"""The proxy's ASGI entry point: `uvicorn proxy.asgi:application` (or `python -m proxy`)."""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.conf import settings  # noqa: E402  (after setup: settings are read from the environment)

from proxy.app import ServiceProxy  # noqa: E402

application = ServiceProxy(portal_upstream=settings.PROXY_PORTAL_UPSTREAM)
