"""The people's admin page: Django's own, plus what disabling someone does to their work."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.urls import reverse
from django.utils.html import format_html

from jobs.services.cancel import owner_disabled

User = get_user_model()


class PersonAdmin(UserAdmin):
    def save_model(self, request, obj, form, change) -> None:
        was_active = change and User.objects.filter(pk=obj.pk, is_active=True).exists()
        super().save_model(request, obj, form, change)
        if was_active and not obj.is_active:
            self._tell_what_happened_to_their_work(request, obj)

    def _tell_what_happened_to_their_work(self, request, person) -> None:
        cancelled, holding = owner_disabled(person, by=request.user)
        name = person.get_username()
        said = f"{name} can no longer sign in or use an API token."
        if cancelled:
            said += f" Their {cancelled} queued workload(s) were cancelled before starting."
        if not holding:
            messages.info(request, said + (" Nothing of theirs is running." if not cancelled else ""))
            return
        link = (
            reverse("admin:jobs_workload_changelist")
            + "?"
            + urlencode({"q": name, "state__in": "SUBMITTING,PENDING,RUNNING"})
        )
        messages.warning(
            request,
            format_html(
                '{} {} workload(s) of theirs still hold GPUs and keep running: <a href="{}">stop them from the '
                "workload list</a> if they must end.",
                said,
                holding,
                link,
            ),
        )


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, PersonAdmin)
