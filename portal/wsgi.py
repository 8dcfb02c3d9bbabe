from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

application = get_wsgi_application()

# The web cannot store a user's secret without the engine's public key: refuse to start, naming it.
from portal import sealing  # noqa: E402 - after Django is set up

sealing.require_public_key()
