from __future__ import annotations

# Import the Celery app when Django starts so that @shared_task binds to it.
from portal.celery import app as celery_app

__all__ = ["celery_app"]
