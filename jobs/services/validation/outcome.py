"""What a check returns: a field's clean value and its problems, and the error a refused submission raises."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Generic, TypeVar


class SubmissionInvalid(Exception):
    """The submission breaks one or more rules; `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{f}: {' '.join(m)}" for f, m in errors.items()))
        self.errors = errors


T = TypeVar("T")
Problem = tuple[str, str]  # (field, message)


@dataclass(frozen=True)
class Checked(Generic[T]):
    """A field's clean value (a stand-in when it is wrong, so later checks can go on) and its problems."""

    value: T
    problems: tuple[Problem, ...] = ()


def refused(value: T, field_name: str, *messages: str) -> Checked[T]:
    return Checked(value, tuple((field_name, m) for m in messages))


WHOLE_NUMBER = "Must be a whole number."


def is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and re.fullmatch(r"-?\d{1,9}", value.strip()) is not None


def duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} day(s)"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} hour(s)"
    if seconds % 60 == 0:
        return f"{seconds // 60} minute(s)"
    return f"{seconds} s"
