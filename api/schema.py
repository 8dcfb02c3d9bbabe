"""OpenAPI tweaks so the schema says what the endpoints really do."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema

from api.serializers import ErrorSerializer

# Every endpoint can answer these, in the one error format.
COMMON_ERRORS = {
    "400": "Invalid input; `error.fields` names each wrong field.",
    "401": "No valid credentials.",
    "403": "Authenticated, but not allowed to do this.",
    "404": "Not found (or not in one of your teams).",
    "405": "Method not allowed.",
    "413": "Request body too large.",
    "415": "Unsupported media type.",
    "429": "Too many requests; see the Retry-After header.",
}


class PortalAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for code, description in COMMON_ERRORS.items():
            if code in responses:
                continue
            if code in ("413", "415") and self.method not in ("POST", "PUT", "PATCH"):
                continue
            responses[code] = self._get_response_for_code(ErrorSerializer, code, ["application/json"], direction)
            responses[code]["description"] = description
        for code, response in responses.items():
            content = response.get("content")
            if code.isdigit() and int(code) >= 400 and content:
                # Errors are always JSON (ApiViewMixin.finalize_response), even from text and CSV endpoints.
                response["content"] = {"application/json": next(iter(content.values()))}
        if "429" in responses:
            responses["429"]["headers"] = {
                "Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}
            }
        return responses


def forbid_unknown_request_fields(result, generator, request, public):
    """The submission and the notification preferences refuse unknown fields; say so in the schema."""
    schemas = result.get("components", {}).get("schemas", {})
    for name in ("WorkloadCreateRequest", "EnvVarRequest", "PreferenceRequest", "PatchedPreferenceRequest"):
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    return result
