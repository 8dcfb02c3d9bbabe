"""The profile pages where people keep their SSH public keys (server-rendered); identity.sshkeys decides."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from identity.models import SshKey
from identity.sshkeys import KeyRefused, key_add, key_delete


@login_required
def ssh_keys(request: HttpRequest) -> HttpResponse:
    """Add and remove SSH public keys; a refused key names its field and stores nothing (400)."""
    errors: dict[str, str] = {}
    values = {"name": "", "public_key": ""}
    if request.method == "POST":
        values = {f: (request.POST.get(f) or "") for f in values}
        try:
            key = key_add(user=request.user, name=values["name"], public_key=values["public_key"])
        except KeyRefused as exc:
            errors[exc.field] = str(exc)
        else:
            messages.success(request, f"Key “{key.name}” added ({key.fingerprint}).")
            return redirect("ssh-keys")
    return render(
        request,
        "identity/ssh_keys.html",
        {"keys": SshKey.objects.filter(user=request.user), "errors": errors, "values": values},
        status=400 if errors else 200,
    )


@login_required
@require_POST
def ssh_key_remove(request: HttpRequest, key_id: int) -> HttpResponse:
    key = get_object_or_404(SshKey, id=key_id, user=request.user)
    key_delete(key=key)
    messages.success(request, f"Key “{key.name}” removed; services stop accepting it within a minute.")
    return redirect("ssh-keys")
