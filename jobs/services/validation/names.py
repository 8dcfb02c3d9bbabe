"""A workload's name: a DNS label, given or made from the image."""

from __future__ import annotations

import re
from typing import Any

from jobs.services.validation.outcome import Checked, refused
from spec_rules import MAX_NAME, NAME_RE, NAME_RULE


def default_name(image: str) -> str:
    """A DNS label made from the image's last path component (`pytorch` for nvcr.io/nvidia/pytorch:24)."""
    base = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0] if image else "workload"
    name = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:MAX_NAME].rstrip("-") or "workload"
    if not name[0].isalpha():
        name = f"w-{name}"[:MAX_NAME].rstrip("-")
    return name


def check_name(value: Any, *, image: str) -> Checked[str]:
    if not isinstance(value, str):
        return refused(default_name(image), "name", "Must be text.")
    if not value:
        return Checked(default_name(image))
    if len(value) > MAX_NAME:
        return refused(value, "name", f"At most {MAX_NAME} characters.")
    if not NAME_RE.match(value):
        return refused(value, "name", NAME_RULE)
    return Checked(value)
