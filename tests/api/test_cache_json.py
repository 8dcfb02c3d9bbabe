"""The API's shared cache (throttle counters) holds JSON only: a pickle written into Redis by whoever can
reach it is refused, never executed (issue 18: Django's RedisCache unpickles what it reads)."""

from __future__ import annotations

import os
import pickle

import pytest
import redis
from django.core.cache import caches

from portal.cache import JsonSerializer, RefusedPayload

MARKER_ENV = "GPUPORTAL_PICKLE_RAN"


def mark_ran(value: str) -> None:
    os.environ[MARKER_ENV] = value


class Payload:
    """Unpickling this runs mark_ran in the reading process: the shape of a real attack's payload."""

    def __reduce__(self):
        return (mark_ran, ("yes",))


@pytest.fixture
def api_cache():
    cache = caches["api"]
    try:
        cache.clear()
    except redis.RedisError:
        pytest.skip("the API cache's Redis is not reachable (run under devtools.testenv)")
    yield cache
    cache.clear()


def test_values_are_stored_as_json(api_cache):
    api_cache.set("history", [1.5, 2.5])
    raw = api_cache._cache.get_client().get(api_cache.make_and_validate_key("history"))
    assert raw == b"[1.5,2.5]"
    assert api_cache.get("history") == [1.5, 2.5]
    api_cache.set("count", 3)
    assert api_cache.incr("count") == 4


def test_a_pickle_written_into_redis_is_refused_not_executed(api_cache, caplog):
    os.environ.pop(MARKER_ENV, None)
    key = api_cache.make_and_validate_key("throttle_token_t1")
    api_cache._cache.get_client(write=True).set(key, pickle.dumps(Payload()))
    assert api_cache.get("throttle_token_t1", "default") == "default"
    assert api_cache.get_many(["throttle_token_t1"]) == {}
    assert MARKER_ENV not in os.environ
    assert "refused" in caplog.text
    # Django's own serializer would have run it: the payload is a real one.
    from django.core.cache.backends.redis import RedisSerializer

    RedisSerializer().loads(pickle.dumps(Payload()))
    assert os.environ.pop(MARKER_ENV) == "yes"


def test_api_requests_survive_a_poisoned_throttle_entry(api_cache, client, django_user_model):
    user = django_user_model.objects.create_user("poisoned", password="pw-poisoned-123")
    client.force_login(user)
    key = api_cache.make_and_validate_key(f"throttle_token_u{user.pk}")
    api_cache._cache.get_client(write=True).set(key, pickle.dumps(Payload()))
    response = client.get("/api/v1/workloads/")
    assert response.status_code == 200
    assert MARKER_ENV not in os.environ


def test_serializer_refuses_non_json_bytes():
    with pytest.raises(RefusedPayload):
        JsonSerializer().loads(b"\x80\x04\x95garbage")
    assert JsonSerializer().loads(b"12") == 12
    assert JsonSerializer().dumps(True) == b"true"
