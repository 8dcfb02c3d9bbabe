"""The admin site of the portal: Django's own, with bulk actions that refuse a bad selection.

Stock Django filters the changelist by the submitted `_selected_action` values as they come; a value that is
no key of the model ("abc" for a numeric id, a number past the column's range, a stale or crafted POST) makes
that filter raise and the admin answers 500. Here every registered ModelAdmin first checks the selection: a
value that cannot be a key, or a key that is not among the rows this changelist shows (another model's id, a
row deleted meanwhile), runs no action and the page says why. Its many-to-many boxes are
portal.admin_widgets.SafeModelMultipleChoiceField, for the same reason.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.apps import AdminConfig
from django.forms import BooleanField

from portal.admin_widgets import SafeModelMultipleChoiceField, could_be_key


class SafeActionsAdmin:
    """A ModelAdmin mix-in: an action runs only on a selection made wholly of this changelist's rows, and a
    many-to-many box given a value no key can be shows the form with its error (not a 500)."""

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        kwargs.setdefault("form_class", SafeModelMultipleChoiceField)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def response_action(self, request, queryset):
        select_across = BooleanField(required=False).to_python(request.POST.get("select_across"))
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        if selected and not select_across:
            pk = self.model._meta.pk
            db = queryset.db
            wanted = set(selected)
            if not all(could_be_key(pk, value, db) for value in wanted):
                return self._refuse_selection(request)
            keys = {pk.to_python(value) for value in wanted}
            if queryset.filter(pk__in=keys).count() != len(keys):
                return self._refuse_selection(request)
        return super().response_action(request, queryset)

    def _refuse_selection(self, request):
        self.message_user(
            request,
            f"The selection names {self.model._meta.verbose_name_plural} that are not on this list "
            "(not valid, or deleted meanwhile). No items have been changed: reload the page and select again.",
            messages.ERROR,
        )


class PortalAdminSite(admin.AdminSite):
    def register(self, model_or_iterable, admin_class=None, **options):
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, SafeActionsAdmin):
            admin_class = type(
                admin_class.__name__,
                (SafeActionsAdmin, admin_class),
                {"__module__": admin_class.__module__, "__doc__": admin_class.__doc__},
            )
        return super().register(model_or_iterable, admin_class, **options)


class PortalAdminConfig(AdminConfig):
    default_site = "portal.admin_site.PortalAdminSite"
