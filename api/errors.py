"""One error format for the whole API, whatever raised the error:

{"error": {"status": 400, "code": "invalid", "message": "...", "fields": {"gpu_count": ["..."]}}}
"""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.views import exception_handler as drf_exception_handler

from jobs.services.errors import WorkloadStateError
from jobs.services.logs.container_logs import LogsUnavailable
from jobs.services.validation import SubmissionInvalid

log = logging.getLogger(__name__)


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class ClusterUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The Kubernetes cluster cannot be reached right now; try again in a minute."
    default_code = "cluster_unavailable"


class StoreUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The portal could not store this now; retry later."
    default_code = "unavailable"


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


class Invalid(exceptions.ValidationError):
    """A 400 naming the fields that are wrong, with a summary message."""

    def __init__(self, fields: dict[str, list[str]], message: str = "The request is not valid.") -> None:
        super().__init__(fields)
        self.message = message


def _translate(exc: Exception) -> Exception:
    if isinstance(exc, SubmissionInvalid):
        return Invalid({name: [str(m) for m in messages] for name, messages in exc.errors.items()})
    if isinstance(exc, WorkloadStateError):
        return Conflict(str(exc))
    if isinstance(exc, LogsUnavailable):
        return Conflict(str(exc), code="logs_unavailable")
    if isinstance(exc, Http404):
        return exceptions.NotFound("Not found.")
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    return exc


def _flatten(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested details as {"field" or "field.sub": [messages]}."""
    if isinstance(detail, dict):
        return _merged((f"{prefix}.{key}" if prefix else str(key), value) for key, value in detail.items())
    if isinstance(detail, list):
        items = [(f"{prefix}.{index}" if prefix else str(index), item) for index, item in enumerate(detail)]
        return _merged(items, plain_under=prefix)
    return {prefix or "non_field_errors": [str(detail)]}


def _merged(named, *, plain_under: str | None = None) -> dict[str, list[str]]:
    """The flattened details of each (name, detail), merged; with `plain_under` (a list's items), a plain
    message is listed under that name instead of its own."""
    fields: dict[str, list[str]] = {}
    for name, value in named:
        if plain_under is not None and not isinstance(value, dict | list):
            fields.setdefault(plain_under or "non_field_errors", []).append(str(value))
            continue
        for sub, messages in _flatten(value, name).items():
            fields.setdefault(sub, []).extend(messages)
    return fields


def error_body(status_code: int, code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict:
    return {"error": {"status": status_code, "code": code, "message": message, "fields": fields or {}}}


def api_exception_handler(exc, context):
    exc = _translate(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a bug: Django logs it and answers 500
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        general = fields.pop("non_field_errors", [])
        message = getattr(exc, "message", None) or (" ".join(general) if general else "The request is not valid.")
        if general and fields:
            fields["non_field_errors"] = general
        body = error_body(response.status_code, "invalid", message, fields)
    else:
        detail = getattr(exc, "detail", "")
        code = detail.code if isinstance(detail, exceptions.ErrorDetail) else "error"
        if isinstance(exc, exceptions.Throttled):
            code = "throttled"
        body = error_body(response.status_code, str(code), str(detail))
    response.data = body
    return response
