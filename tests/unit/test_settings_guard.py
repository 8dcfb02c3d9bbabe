"""tests/settings_guard.py: the check that fails any test leaving Django's settings changed.

The leak it exists for: a long-lived override switched on inside a test that already has its own, and put
back after the test's own. Each override restores the layer that was on top when it began, so the
test's override is restored last and stays on under every later test. The suite's page settings were such
a layer (a session fixture, imported into a second package as well); they are now set once, in
`pytest_configure`. The tests after the first two check that what a test changes is gone for the next.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from tests.settings_guard import base_settings, override_layers, settings_leaks, settings_put_back, settings_values


def test_an_override_left_on_and_a_value_left_changed_are_both_named():
    before = settings_values()
    assert settings_leaks(before) == []
    layer = override_settings(API_IDEMPOTENCY_TTL_SECONDS=-1)
    layer.enable()
    base = base_settings()
    saved = base.API_MAX_BODY_BYTES
    try:
        base.API_MAX_BODY_BYTES = saved + 1
        assert settings_leaks(before) == [
            "an override of API_IDEMPOTENCY_TTL_SECONDS is still on",
            "API_MAX_BODY_BYTES was changed and not put back",
        ]
    finally:
        settings_put_back(before)
    assert settings_leaks(before) == []
    assert saved == settings.API_MAX_BODY_BYTES
    assert settings.API_IDEMPOTENCY_TTL_SECONDS != -1


def test_a_longer_lived_override_put_back_after_the_tests_own_leaves_the_tests_own_on():
    before = settings_values()
    own = override_settings(API_IDEMPOTENCY_TTL_SECONDS=-2)  # as the `settings` fixture does
    own.enable()
    longer = override_settings(ALLOWED_HOSTS=["testserver", "localhost"])  # switched on inside the test
    longer.enable()
    own.disable()  # the test ends: its own override goes first,
    longer.disable()  # and the longer-lived one then restores what was on top when it began: the test's
    try:
        assert settings.API_IDEMPOTENCY_TTL_SECONDS == -2
        assert settings_leaks(before) == ["an override of API_IDEMPOTENCY_TTL_SECONDS is still on"]
    finally:
        settings_put_back(before)
    assert settings.API_IDEMPOTENCY_TTL_SECONDS != -2


# A pair in file order: what the first changes through the `settings` fixture, the second must not see.
def test_a_test_changes_a_setting_for_itself(settings):
    settings.API_IDEMPOTENCY_TTL_SECONDS = -3
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    assert settings.API_IDEMPOTENCY_TTL_SECONDS == -3


def test_the_next_test_sees_the_run_settings_again():
    assert settings.API_IDEMPOTENCY_TTL_SECONDS != -3
    assert settings.PASSWORD_HASHERS == ["django.contrib.auth.hashers.MD5PasswordHasher"]  # pytest_configure's
    assert override_layers() == []  # no override of any test's is on under this one


def test_a_first_test_skipped_by_its_marks_does_not_blame_the_next_for_the_sessions_setup(monkeypatch):
    """Run alone, a file whose first test is skipped before any set-up (a `skipif` mark) used to fail the
    second: the session's test environment (ALLOWED_HOSTS, EMAIL_BACKEND) came up in *its* set-up, and the
    guard compared that with what it had read after the skipped one. The hooks are driven as pytest drives
    them, on the guard's state as a fresh run has it."""
    from types import SimpleNamespace

    from tests import settings_guard as guard

    monkeypatch.setattr(guard, "_set_up_once", False, raising=False)
    monkeypatch.setattr(guard, "_after_previous", None)
    base = base_settings()
    monkeypatch.setattr(base, "EMAIL_BACKEND", "before.the.session.Backend")

    def hook(wrapper, *args, outcome=None):
        step = wrapper(*args)
        next(step)
        try:
            if outcome is None:
                step.send(None)
            else:
                step.throw(outcome)
        except StopIteration:
            pass

    first, second, third = (SimpleNamespace(nodeid=f"test_pair.py::{n}") for n in ("first", "second", "third"))
    with pytest.raises(pytest.skip.Exception):
        hook(guard.pytest_runtest_setup, first, outcome=pytest.skip.Exception("cannot here"))
    hook(guard.pytest_runtest_teardown, first, second)
    hook(guard.pytest_runtest_setup, second)
    base.EMAIL_BACKEND = "the.session.Backend"  # the test environment, come up in the second's set-up
    hook(guard.pytest_runtest_teardown, second, third)  # used to fail: "EMAIL_BACKEND was changed"
    base.EMAIL_BACKEND = "a.leak.Backend"  # from here on, a change is the test's own
    with pytest.raises(pytest.fail.Exception, match="EMAIL_BACKEND was changed and not put back"):
        hook(guard.pytest_runtest_teardown, third, object())
