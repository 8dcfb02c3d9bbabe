"""Who may see what of a workload, in one place for the pages and the API."""

from __future__ import annotations


def may_see_env_values(user, workload) -> bool:
    """Plain environment values are the owner's (they often hold tokens); teammates see the names only."""
    return user is not None and (getattr(user, "is_superuser", False) or workload.owner_id == getattr(user, "id", None))


def visible_env(user, workload) -> list[dict[str, str | None]]:
    """The workload's plain environment as `user` may see it: values, or None in place of each value."""
    show = may_see_env_values(user, workload)
    return [{"name": e["name"], "value": e["value"] if show else None} for e in workload.env or []]
