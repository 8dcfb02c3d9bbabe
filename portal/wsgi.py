from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

application = get_wsgi_application()

# The web cannot store a user's secret without the engine's public key: refuse to start, naming it.
from portal import sealing  # noqa: E402 - after Django is set up

sealing.require_public_key()

# Every URLconf and view module imported now, as the worker starts, instead of in the first request it
# serves (0.3 s on a quiet machine, about 0.9 s when the workers of a new pod start together).
from django.urls import get_resolver  # noqa: E402

get_resolver().reverse_dict  # noqa: B018 - reading it populates the resolver
