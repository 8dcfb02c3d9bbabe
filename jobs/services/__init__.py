"""Business logic as plain functions, called alike by the UI, the API, admin and Celery tasks."""
