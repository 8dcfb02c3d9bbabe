"""The command and its arguments: lists of strings, no shell parsing."""

from __future__ import annotations

from typing import Any

from jobs.services.spec_fields import MAX_COMMAND_TOTAL, MAX_ITEM_CHARS, MAX_LIST_ITEMS
from jobs.services.validation.outcome import Checked, refused


def check_arguments(value: Any, field_name: str, default: tuple[str, ...]) -> Checked[tuple[str, ...]]:
    """`command` or `args`: a list of strings, each one argument (no shell parsing); empty: the default."""
    if value in (None, ""):
        return Checked(tuple(default))
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return refused((), field_name, "A list of strings (each one argument; no shell parsing is done).")
    messages = []
    if len(value) > MAX_LIST_ITEMS:
        messages.append(f"At most {MAX_LIST_ITEMS} items.")
    for item in value:  # the first bad item is named; one message is enough
        if len(item) > MAX_ITEM_CHARS:
            messages.append(f"Each item may be at most {MAX_ITEM_CHARS} characters.")
            break
        if "\x00" in item:
            messages.append("Items may not contain NUL characters.")
            break
    return refused(tuple(value), field_name, *messages)


def check_command_total(command: tuple[str, ...], args: tuple[str, ...]) -> Checked[None]:
    if sum(len(x) for x in command + args) > MAX_COMMAND_TOTAL:
        return refused(None, "args", f"Command and arguments together may be at most {MAX_COMMAND_TOTAL // 1024} KiB.")
    return Checked(None)
