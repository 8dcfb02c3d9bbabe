"""Every test leaves Django's settings as it found them; a test that does not fails, by name.

pytest-django's `settings` fixture and `override_settings` stack layers over the settings object, and
each puts back, when it ends, the layer that was on top when it began. A layer that outlives the test
that enabled it (a session-scoped override switched on inside some test, as the UI's page settings
were) stays under every later test, and anything a later fixture writes "through" it is lost when it
finally goes: the suite used to patch that over by re-asserting the engine's identity before each engine
test. Now, after every test:

- no override layer may be left on (the run's own settings are set once, in tests/conftest.py's
  `pytest_configure`, never as a layer);
- no setting may differ from what it was after the previous test, except those that session fixtures
  set for the whole run through `session_setting` (the engine's identity, its broker).

Loaded as a plugin from tests/conftest.py. When a test changes the Kubernetes connection settings (its
own kubeconfig, in a `settings` override), the cached clients and namespace checks are dropped when the
setting changes back, so the next test talks to the cluster as the session's identity again.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import UserSettingsHolder, settings
from django.core.signals import setting_changed
from django.dispatch import receiver

_session_keys: set[str] = set()
_after_previous: dict[str, Any] | None = None
_set_up_once = False  # whether any test's set-up has run to its end (the session fixtures are up then)
KUBE_SETTINGS = ("KUBECONFIG", "KUBE_CONTEXT", "KUBE_NAMESPACE_PREFIX", "PORTAL_INSTANCE")


def base_settings() -> Any:
    """Django's settings object beneath any active override_settings layers."""
    wrapped = settings._wrapped
    while isinstance(wrapped, UserSettingsHolder):
        wrapped = wrapped.default_settings
    return wrapped


def session_setting(name: str, value: Any) -> None:
    """Set a setting for the rest of the run (a session fixture's job), beneath any override a test has on."""
    setattr(base_settings(), name, value)
    settings.__dict__.pop(name, None)  # django.conf.settings keeps what it read; it must read this again
    _session_keys.add(name)


def override_layers() -> list[list[str]]:
    """The override layers on now, innermost first, each as the names it overrides."""
    layers = []
    wrapped = settings._wrapped
    while isinstance(wrapped, UserSettingsHolder):
        layers.append(sorted(k for k in vars(wrapped) if k.isupper() and k != "SETTINGS_MODULE"))
        wrapped = wrapped.default_settings
    return layers


def settings_values() -> dict[str, Any]:
    """The settings beneath the layers, less those session fixtures own."""
    return {k: v for k, v in vars(base_settings()).items() if k.isupper() and k not in _session_keys}


def settings_changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The names whose values differ between two `settings_values()` (session fixtures' own left out)."""
    missing = object()
    changed = []
    for name in sorted((set(before) | set(after)) - _session_keys):
        old, new = before.get(name, missing), after.get(name, missing)
        if old is not new and (old is missing or new is missing or old != new):
            changed.append(name)
    return changed


def settings_leaks(before: dict[str, Any] | None) -> list[str]:
    """What a test left behind: override layers still on, settings changed since `before` (None: unknown)."""
    problems = [f"an override of {', '.join(names) or 'nothing'} is still on" for names in override_layers()]
    if before is not None:
        problems += [f"{name} was changed and not put back" for name in settings_changed(before, settings_values())]
    return problems


def settings_put_back(before: dict[str, Any] | None) -> None:
    """Undo what a test left (layers, and values changed since `before`), so that only that test fails."""
    base = base_settings()
    if before is not None:
        for name in settings_changed(before, settings_values()):
            if name in before:
                setattr(base, name, before[name])
            else:
                delattr(base, name)
    settings._wrapped = base  # which also makes django.conf.settings forget what it read


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item):
    global _set_up_once
    result = yield
    _set_up_once = True
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    global _after_previous
    result = yield
    # Values are not checked after the first test that was set up, nor after the last: session fixtures
    # (pytest-django's test environment, the test database) set settings up during the first set-up that
    # runs to its end, and put them back during the last test's tear-down. A test skipped by its marks
    # before any set-up ran (the first of a file run alone, say) leaves nothing to compare against.
    before = _after_previous if nextitem is not None else None
    _after_previous = settings_values() if _set_up_once else None
    leaks = settings_leaks(before)
    if leaks:
        settings_put_back(before)
        _after_previous = settings_values()
        pytest.fail(f"{item.nodeid} left Django settings changed: " + "; ".join(leaks), pytrace=False)
    return result


@receiver(setting_changed)
def _kube_settings_changed(*, setting: str, **kwargs: Any) -> None:
    if setting not in KUBE_SETTINGS:
        return
    from jobs.kube import client as kube
    from jobs.services.provisioning import forget_namespaces

    kube.reset()
    forget_namespaces()
