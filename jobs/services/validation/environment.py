"""Environment variables and the secrets attached as variables. The name rule itself is spec_rules'
(`env_name_problem`), which the launch form and the CLI use too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.services.spec_fields import MAX_ENV_TOTAL, MAX_ENV_VALUE, MAX_ENV_VARS, MAX_SECRET_REFS
from jobs.services.validation.outcome import Checked, refused
from spec_rules import env_name_problem


def _env_pairs(value: Any) -> list[tuple[Any, Any]] | None:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, list | tuple) and all(isinstance(v, Mapping) for v in value):
        return [(v.get("name"), v.get("value", "")) for v in value]
    return None


def _env_problem(name: Any, value: Any, seen: set[str]) -> str | None:
    """What is wrong with one variable, or None."""
    problem = env_name_problem(name)
    if problem:
        return problem
    if name in seen:
        return f"{name} is given twice."
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"The value of {name} must be text."
    if len(str(value)) > MAX_ENV_VALUE:
        return f"The value of {name} is longer than {MAX_ENV_VALUE // 1024} KiB."
    if "\x00" in str(value):
        return f"The value of {name} contains a NUL character."
    return None


def check_env(value: Any) -> Checked[tuple[tuple[str, str], ...]]:
    """`env`: {NAME: value} or [{"name": ..., "value": ...}]; names valid, not the portal's, not twice;
    values text (numbers are turned into text) within the size caps."""
    if value in (None, "", [], {}):
        return Checked(())
    pairs = _env_pairs(value)
    if pairs is None:
        return refused((), "env", 'A mapping of NAME to value, or a list of {"name": ..., "value": ...}.')
    if len(pairs) > MAX_ENV_VARS:
        return refused((), "env", f"At most {MAX_ENV_VARS} variables.")
    messages: list[str] = []
    clean: list[tuple[str, str]] = []
    for name, val in pairs:
        problem = _env_problem(name, val, {n for n, _ in clean})
        if problem:
            messages.append(problem)
        else:
            clean.append((name, str(val)))
    if sum(len(n) + len(v) for n, v in clean) > MAX_ENV_TOTAL:
        messages.append(f"All variables together may be at most {MAX_ENV_TOTAL // 1024} KiB.")
    return refused(tuple(clean), "env", *messages)


def check_secret_refs(
    value: Any, available: Mapping[str, str], env_names: set[str]
) -> Checked[tuple[tuple[str, str, str], ...]]:
    """`secrets`: [{"name": <stored secret>, "env": <variable, optional>}] or a list of names.

    Each must be a secret the user may use; no secret twice; an env variable neither reserved nor
    clashing with a plain variable or another secret's. The value: (name, Kubernetes name, variable)."""
    if value in (None, "", []):
        return Checked(())
    if not isinstance(value, list | tuple):
        return refused((), "secrets", 'A list of {"name": <secret>, "env": <VARIABLE>} (env optional).')
    if len(value) > MAX_SECRET_REFS:
        return refused((), "secrets", f"At most {MAX_SECRET_REFS} secrets.")
    messages: list[str] = []
    clean: list[tuple[str, str, str]] = []
    used_env = set(env_names)
    for item in value:
        ref = {"name": item} if isinstance(item, str) else item
        problem = _secret_ref_problem(ref, available, {n for n, _, _ in clean}, used_env)
        if problem:
            messages.append(problem)
            continue
        env_name = ref.get("env") or ""
        if env_name:
            used_env.add(env_name)
        clean.append((ref["name"], available[ref["name"]], env_name))
    return refused(tuple(clean), "secrets", *messages)


def _secret_ref_problem(ref: Any, available: Mapping[str, str], seen: set[str], used_env: set[str]) -> str | None:
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or set(ref) - {"name", "env"}:
        return 'Each item is a secret name or {"name": <secret>, "env": <VARIABLE>}.'
    name, env_name = ref["name"], ref.get("env") or ""
    if name not in available:
        return f"No secret named {name[:40]!r} is available to you (store it first)."
    if name in seen:
        return f"{name} is given twice."
    if not env_name:
        return None
    problem = env_name_problem(env_name)
    if problem:
        return problem
    if env_name in used_env:
        return f"{env_name} clashes with another variable of the same name."
    return None
