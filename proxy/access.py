"""Who goes through the door at /w/<uid>/, and where it leads: the proxy's synchronous, Django-side half.

The portal's session cookie is the only login on the portal's own origin: the session is loaded with
Django's own session engine and user check (`auth.get_user`, which also verifies the session's password
hash, so "log out everywhere" and password changes close the door too). On a separate apps' origin
(PROXY_ORIGIN) the portal hands the person over with a single-use ticket (jobs.services.opening) and the
proxy keeps its own signed cookie per service, bound to the person's password hash. The rule itself is `jobs.policy.may_open`. The target is the
Service's Endpoints (a ready pod's IP and port) read through `jobs.kube.client`, so it works with or
without kube-proxy and cluster DNS.

Both answers are cached for a moment per process (PROXY_ACCESS_CACHE_SECONDS, PROXY_ENDPOINT_CACHE_SECONDS):
a page load fetches dozens of assets, and each must not cost a database round trip and an API call.
Sharing or un-sharing takes effect within that moment.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass
from importlib import import_module
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import auth
from django.contrib.auth import get_user_model
from django.core import signing
from django.db import close_old_connections
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from jobs import policy
from jobs.kube import client as kube
from jobs.models import Kind, State, Workload
from jobs.services import opening

log = logging.getLogger(__name__)
APP_COOKIE_SALT = "gpuportal.proxy.app-cookie"


class Outcome(enum.Enum):
    OPEN = "open"  # go through
    SIGN_IN = "sign_in"  # anonymous (or an expired session): to the sign-in page and back
    NOT_FOUND = "not_found"  # not yours, not shared with you, not a service, no such workload
    STARTING = "starting"  # queued, pending, or running without a ready pod yet
    ENDED = "ended"


@dataclass(frozen=True)
class Door:
    outcome: Outcome
    workload_id: int | None = None
    uid: str = ""
    name: str = ""
    state: str = ""  # the human label, for the pages
    namespace: str = ""
    service: str = ""
    may_see: bool = False  # a teammate refused because it is not shared: the 404 page says why
    user_id: int | None = None


class TtlCache:
    """A tiny per-process cache with expiry; thread-safe because Django calls run in worker threads."""

    def __init__(self) -> None:
        self._items: dict[object, tuple[float, object]] = {}
        self._lock = threading.Lock()

    def get(self, key: object) -> object | None:
        with self._lock:
            item = self._items.get(key)
        if item is None or item[0] < time.monotonic():
            return None
        return item[1]

    def put(self, key: object, value: object, ttl: float) -> None:
        with self._lock:
            if len(self._items) > 10_000:  # a bound, not an LRU: stale entries go first
                now = time.monotonic()
                self._items = {k: v for k, v in self._items.items() if v[0] >= now}
            self._items[key] = (time.monotonic() + ttl, value)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_doors = TtlCache()
_endpoints = TtlCache()
_activity_written: dict[int, float] = {}
_activity_lock = threading.Lock()


def credential_cookie() -> str:
    """The cookie that says who is at the door: the portal's session on the portal's origin, the proxy's
    own cookie (set by the handoff) on a separate apps' origin."""
    return settings.PROXY_APP_COOKIE_NAME if settings.PROXY_ORIGIN else settings.SESSION_COOKIE_NAME


def _user_for(credential: str | None, uid: str):
    if not credential:
        return None
    if settings.PROXY_ORIGIN:
        return _app_cookie_user(credential, uid)
    request = HttpRequest()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(credential)
    user = auth.get_user(request)
    return user if user.is_authenticated else None


def app_cookie_value(user, uid: str) -> str:
    """The proxy's cookie for one person and one service: signed, bound to the service, and to the
    person's password (a password change signs them out here too, as it does in the portal)."""
    return signing.dumps({"u": user.pk, "w": uid, "h": user.get_session_auth_hash()}, salt=APP_COOKIE_SALT)


def _app_cookie_user(value: str, uid: str):
    try:
        claims = signing.loads(value, salt=APP_COOKIE_SALT, max_age=settings.PROXY_APP_COOKIE_SECONDS)
    except signing.BadSignature:  # expired ones too: the handoff runs again
        return None
    if not isinstance(claims, dict) or claims.get("w") != uid:
        return None
    user = get_user_model().objects.filter(pk=claims.get("u"), is_active=True).first()
    if user is None or not constant_time_compare(str(claims.get("h", "")), user.get_session_auth_hash()):
        return None
    return user


def door(credential: str | None, uid: str, *, fresh: bool = False) -> Door:
    """Who may pass to workload `uid` with this credential (credential_cookie()), and what they find.
    `fresh`: from the database, whatever the cache holds."""
    cached = None if fresh else _doors.get((credential, uid))
    if isinstance(cached, Door):
        return cached
    close_old_connections()  # the proxy is long-lived; Django's request signals never run here
    answer = decide(_user_for(credential, uid), uid)
    if answer.outcome != Outcome.SIGN_IN:
        _doors.put((credential, uid), answer, settings.PROXY_ACCESS_CACHE_SECONDS)
    return answer


@dataclass(frozen=True)
class Handoff:
    door: Door
    cookie: str = ""  # the proxy's cookie for this person and service; "" when the door stays shut
    refused: str = ""  # why the ticket signs no one in (expired, used, tampered with)


def redeem(ticket: str) -> Handoff:
    """Exchange a handoff ticket (minted by the portal) for the proxy's own cookie, once. Whether the
    person may open the service is decided again here: sharing may have ended since the ticket was made."""
    close_old_connections()
    try:
        user_id, uid = opening.ticket_redeem(ticket)
    except opening.TicketRefused as exc:
        return Handoff(Door(Outcome.NOT_FOUND), refused=str(exc))
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    decided = decide(user, uid)
    if user is None or decided.outcome in (Outcome.SIGN_IN, Outcome.NOT_FOUND):
        return Handoff(decided)
    return Handoff(decided, cookie=app_cookie_value(user, decided.uid))


def decide(user, uid: str) -> Door:
    """The door to workload `uid` for `user` (None: not signed in)."""
    if user is None:
        return Door(Outcome.SIGN_IN)
    workload = Workload.objects.filter(uid=uid[:16]).first()
    if workload is None or workload.kind != Kind.SERVICE:
        return Door(Outcome.NOT_FOUND, user_id=user.id)
    facts = {
        "workload_id": workload.id,
        "uid": workload.uid,
        "name": workload.name,
        "state": workload.get_state_display(),
        "namespace": workload.namespace,
        "service": workload.k8s_name,
        "user_id": user.id,
    }
    if not policy.may_open(user, workload):
        return Door(Outcome.NOT_FOUND, user_id=user.id, may_see=policy.may_see(user, workload))
    if workload.is_final:
        return Door(Outcome.ENDED, **facts)
    if workload.state != State.RUNNING or not workload.namespace or not workload.k8s_name:
        return Door(Outcome.STARTING, **facts)
    return Door(Outcome.OPEN, **facts)


def ready_endpoint(namespace: str, service: str) -> tuple[str, int] | None:
    """The address of a ready pod behind the Service, or None while there is none (cached briefly)."""
    key = (namespace, service)
    cached = _endpoints.get(key)
    if cached is not None:
        return cached if cached != () else None  # type: ignore[return-value]
    try:
        found = kube.ready_endpoint(namespace, service)
    except Exception:  # the API server is away: the starting page says so, the next request asks again
        log.warning("reading the endpoints of %s/%s failed", namespace, service, exc_info=True)
        return None
    ttl = settings.PROXY_ENDPOINT_CACHE_SECONDS if found else min(1.0, settings.PROXY_ENDPOINT_CACHE_SECONDS)
    _endpoints.put(key, found or (), ttl)
    return found


def forget_endpoint(namespace: str, service: str) -> None:
    """The cached address refused a connection: ask Kubernetes again next time (the pod moved)."""
    _endpoints.put((namespace, service), (), 0.0)


def record_activity(workload_id: int) -> None:
    """Remember that someone used the service now: at most one write per PROXY_ACTIVITY_WRITE_SECONDS."""
    now = time.monotonic()
    with _activity_lock:
        last = _activity_written.get(workload_id)
        if last is not None and now - last < settings.PROXY_ACTIVITY_WRITE_SECONDS:
            return
        _activity_written[workload_id] = now
    close_old_connections()
    Workload.objects.filter(id=workload_id).update(last_activity_at=timezone.now())


def reset_caches() -> None:
    _doors.clear()
    _endpoints.clear()
    with _activity_lock:
        _activity_written.clear()


# --- the portal's pages at the door ------------------------------------------------------------------
def page(kind: str, door: Door | None = None, path: str = "", reason: str = "") -> tuple[int, str]:
    """(status, HTML) for one of the door's pages: starting, ended, timeout, unreachable, not_found,
    handoff (a sign-in link that cannot be used). On a separate apps' origin their links and styles point
    at the portal's own origin."""
    portal = settings.SITE_URL.rstrip("/") if settings.PROXY_ORIGIN else ""
    context = {
        "door": door,
        "path": path,
        "reason": reason,
        "portal": portal,
        "refresh_seconds": settings.PROXY_STARTING_REFRESH_SECONDS,
    }
    if door is not None and door.uid:
        context["detail_url"] = portal + reverse("workload_detail", kwargs={"uid": door.uid})
    status = {"starting": 503, "ended": 410, "timeout": 504, "unreachable": 502, "not_found": 404, "handoff": 403}
    return status[kind], render_to_string(f"proxy/{kind}.html", context)


def render_error() -> str:
    return render_to_string("500.html")


def sign_in_url(next_path: str, uid: str) -> str:
    """Where someone not signed in goes: the portal's sign-in (same origin), or the portal's handoff for
    this service (separate origin: it signs in if needed, then hands over a fresh ticket)."""
    if settings.PROXY_ORIGIN:
        handoff = reverse("workload_open", kwargs={"uid": uid})
        return f"{settings.SITE_URL.rstrip('/')}{handoff}?{urlencode({'next': next_path})}"
    return f"{reverse(settings.LOGIN_URL)}?{urlencode({'next': next_path})}"
