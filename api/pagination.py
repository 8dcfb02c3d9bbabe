"""Cursor pagination with signed, expiring cursors: a garbled or stale cursor is a clear 400."""

from __future__ import annotations

from django.conf import settings
from django.core import signing
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.utils.urls import replace_query_param

SALT = "api.cursor"


class WorkloadCursorPagination(CursorPagination):
    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not raw.isdigit() or not 1 <= int(raw) <= self.max_page_size:
            raise ValidationError({"page_size": [f"A whole number from 1 to {self.max_page_size}."]})
        return int(raw)

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            tokens = signing.loads(encoded, salt=SALT, max_age=settings.API_CURSOR_MAX_AGE_SECONDS)
            offset = int(tokens.get("o", 0))
            reverse = bool(int(tokens.get("r", 0)))
            position = tokens.get("p")
            if offset < 0 or offset > self.offset_cutoff or not (position is None or isinstance(position, str)):
                raise ValueError
        except signing.SignatureExpired:
            raise ValidationError({"cursor": ["This cursor has expired; start again from the first page."]}) from None
        except (signing.BadSignature, ValueError, TypeError, AttributeError):
            raise ValidationError({"cursor": ["Not a cursor this API handed out."]}) from None
        return Cursor(offset=offset, reverse=reverse, position=position)

    def encode_cursor(self, cursor):
        tokens = {"o": cursor.offset, "r": int(cursor.reverse), "p": cursor.position}
        encoded = signing.dumps(tokens, salt=SALT, compress=True)
        return replace_query_param(self.base_url, self.cursor_query_param, encoded)

    def get_paginated_response_schema(self, schema):
        result = super().get_paginated_response_schema(schema)
        result["properties"]["next"]["format"] = "uri"
        result["properties"]["previous"]["format"] = "uri"
        return result
