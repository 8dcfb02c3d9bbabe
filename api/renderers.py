from __future__ import annotations

import io

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer

from jobs.services.usage.csv_export import SafeCsvWriter


class PortalContentNegotiation(DefaultContentNegotiation):
    """`?format=` that the endpoint does not answer in is a 400 naming `format` and the formats it has
    (DRF's own answer is a 404 "Not found." for an address that exists)."""

    def filter_renderers(self, renderers, format):
        matching = [renderer for renderer in renderers if renderer.format == format]
        if not matching:
            # Here, not at the top: DRF imports this class while api.errors (which imports DRF) loads.
            from api.errors import Invalid

            formats = ", ".join(dict.fromkeys(renderer.format for renderer in renderers))
            raise Invalid({"format": [f"One of: {formats}."]})
        return matching


class PlainTextRenderer(BaseRenderer):
    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data.encode(self.charset) if isinstance(data, str) else data


class UsageCsvRenderer(BaseRenderer):
    """Usage rows as CSV: a header line, then one line per group."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, str | bytes):
            return data
        if not isinstance(data, dict) or "rows" not in data:
            return JSONRenderer().render(data)
        out = io.StringIO()
        writer = SafeCsvWriter(out)
        header = [
            data["group_by"], "gpu_hours", "weighted_gpu_hours", "borrowed_gpu_hours", "gpu_equivalent_hours",
            "lost_gpu_hours",
        ]  # fmt: skip
        writer.writerow(header)
        for row in data["rows"]:
            writer.writerow(
                [
                    row["key"],
                    f"{row['gpu_hours']:.6f}",
                    f"{row['weighted_gpu_hours']:.6f}",
                    f"{row.get('borrowed_gpu_hours', 0.0):.6f}",
                    f"{row.get('gpu_equivalent_hours', row['gpu_hours']):.6f}",
                    f"{row.get('lost_gpu_hours', 0.0):.6f}",
                ]
            )
        return out.getvalue().encode(self.charset)
