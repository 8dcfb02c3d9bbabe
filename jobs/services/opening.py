"""Opening a service through the portal: its address, the handoff to the apps' own origin, and the
owner's "shared with my team" switch.

Two ways to serve /w/<uid>/ (SECURITY.md, "Services you open"):
- **Same origin** (PROXY_ORIGIN empty): the proxy reads the portal's session cookie. Simplest; but the
  app's JavaScript runs on the portal's origin, so a shared service's owner could act in the portal as a
  teammate who opens it.
- **Separate origin** (PROXY_ORIGIN set): Open links go to the portal's `workloads/<uid>/open/`, which
  mints a **ticket** for (person, service) and sends the browser to the proxy's `/w/_login` on the apps'
  origin. The ticket is signed (tampering fails), lives PROXY_TICKET_SECONDS, and is redeemed once (its
  nonce is recorded); the proxy answers with its own host-only cookie scoped to `/w/<uid>/`. The portal's
  session cookie never goes to the apps' origin.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from jobs import policy
from jobs.models import Kind, RedeemedTicket, Workload, WorkloadEvent
from jobs.services import dispatch
from jobs.services.errors import WorkloadStateError
from jobs.services.transitions import note

TICKET_SALT = "gpuportal.opening.ticket"
HANDOFF_PATH = f"{settings.PROXY_PREFIX}_login"  # on the apps' origin, served by the proxy itself
TICKET_EXPIRED = "This sign-in link has expired. Open the service again from the portal."
TICKET_USED = "This sign-in link was already used. Open the service again from the portal."
TICKET_INVALID = "This sign-in link is not valid. Open the service again from the portal."


class TicketRefused(Exception):
    """A handoff ticket that must not sign anyone in: tampered with, expired, or already used."""


SHARED, UNSHARED = "SharedWithTeam", "NoLongerShared"


def open_path(workload: Workload) -> str:
    """The service's path on the portal (`/w/<uid>/`), or "" for a batch job. The app is told this prefix
    when it starts (GPUPORTAL_BASE_URL, the catalog's base-path template)."""
    return f"{settings.PROXY_PREFIX}{workload.uid}/" if workload.kind == Kind.SERVICE else ""


def open_link(workload: Workload) -> str:
    """What an Open button points at: the service's path on the portal's origin, or, when services have
    an origin of their own, the portal's handoff view (which signs the person in over there)."""
    if workload.kind != Kind.SERVICE:
        return ""
    if settings.PROXY_ORIGIN:
        return reverse("workload_open", kwargs={"uid": workload.uid})
    return open_path(workload)


def open_url(workload: Workload) -> str:
    """The absolute address to open it at, starting on the portal's public origin (SITE_URL)."""
    link = open_link(workload)
    return f"{settings.SITE_URL.rstrip('/')}{link}" if link else ""


def service_origin(uid: str) -> str:
    """The apps' origin for this service ("" when services share the portal's origin)."""
    return settings.PROXY_ORIGIN.replace("{uid}", uid)


def ticket_mint(*, user, workload: Workload) -> str:
    """A signed, short-lived ticket that lets the proxy sign `user` in to this one service. The caller has
    checked policy.may_open; the proxy checks it again when the ticket is redeemed."""
    return signing.dumps({"u": user.pk, "w": workload.uid, "n": secrets.token_hex(16)}, salt=TICKET_SALT)


def handoff_url(*, user, workload: Workload, next_path: str = "") -> str:
    """Where the portal sends the browser: the proxy's handoff on the apps' origin, with a fresh ticket and
    the path to land on (only ever inside this service's prefix)."""
    prefix = open_path(workload)
    landing = next_path if next_path.startswith(prefix) else prefix
    query = urlencode({"ticket": ticket_mint(user=user, workload=workload), "next": landing})
    return f"{service_origin(workload.uid)}{HANDOFF_PATH}?{query}"


def ticket_redeem(ticket: str) -> tuple[int, str]:
    """(user id, workload uid) of a ticket, exactly once. Raises TicketRefused with the reason to show."""
    try:
        claims = signing.loads(ticket, salt=TICKET_SALT, max_age=settings.PROXY_TICKET_SECONDS)
    except signing.SignatureExpired as exc:
        raise TicketRefused(TICKET_EXPIRED) from exc
    except signing.BadSignature as exc:
        raise TicketRefused(TICKET_INVALID) from exc
    if not isinstance(claims, dict) or not {"u", "w", "n"} <= claims.keys():
        raise TicketRefused(TICKET_INVALID)
    now = timezone.now()
    try:
        with transaction.atomic():
            RedeemedTicket.objects.create(nonce=str(claims["n"])[:32], redeemed_at=now)
    except IntegrityError as exc:
        raise TicketRefused(TICKET_USED) from exc
    # Rows of tickets that have expired anyway prove nothing any more.
    RedeemedTicket.objects.filter(redeemed_at__lt=now - timedelta(seconds=2 * settings.PROXY_TICKET_SECONDS)).delete()
    return int(claims["u"]), str(claims["w"])


def workload_share(*, workload: Workload, by, shared: bool) -> bool:
    """Let (or stop letting) the owner's teammates open the service. Returns whether anything changed;
    each change is a timeline entry. Raises WorkloadStateError for anyone but the owner, or a batch job."""
    if workload.kind != Kind.SERVICE:
        raise WorkloadStateError("Only services can be opened, so only services can be shared.")
    if not policy.may_share(by, workload):
        raise WorkloadStateError("Only the owner of a service decides who else may open it.")
    changed = Workload.objects.filter(id=workload.id).exclude(shared_with_team=shared).update(shared_with_team=shared)
    workload.shared_with_team = shared
    if changed:
        note(
            workload,
            reason=SHARED if shared else UNSHARED,
            message="Teammates may now open this service." if shared else "Only its owner may open this service now.",
            source=WorkloadEvent.Source.PORTAL,
        )
        dispatch.publish_ssh_keys([workload.id])  # teammates' SSH keys come or go with the sharing
    return bool(changed)
