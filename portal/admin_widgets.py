"""Django admin's autocomplete box, safe against a submitted value that is no key at all.

When a form comes back with errors the stock widget looks the submitted values up to show them again;
a value that is not a key of the right type ("abc" for a numeric id, a crafted or stale POST) makes that
lookup raise, and the admin answers 500 instead of the form with "Select a valid choice". Values that
cannot be a key are simply not shown again; the field's own validation still names the error.
"""

from __future__ import annotations

from django import forms
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.exceptions import ValidationError
from django.db import connections


def could_be_key(key_field, value, db: str | None = None) -> bool:
    """Whether `value` can be looked up as `key_field` without the database or Django raising."""
    try:
        key = key_field.to_python(value)
    except (ValidationError, TypeError, ValueError):
        return False
    if key is None:
        return False
    if isinstance(key, int):  # beyond the column's range (SQLite raises OverflowError on such a lookup)
        low, high = connections[db or "default"].ops.integer_field_range(key_field.get_internal_type())
        return (low is None or key >= low) and (high is None or key <= high)
    return not (isinstance(key, str) and "\x00" in key)  # PostgreSQL refuses NUL in text


class SafeAutocompleteSelect(AutocompleteSelect):
    def _could_be_key(self, value) -> bool:
        remote = self.field.remote_field
        key_field = remote.model._meta.get_field(getattr(remote, "field_name", None) or remote.model._meta.pk.name)
        return could_be_key(key_field, value, self.db)

    def optgroups(self, name, value, attr=None):
        return super().optgroups(name, [v for v in value if v in ("", None) or self._could_be_key(v)], attr)


class SafeAutocompleteAdmin:
    """A ModelAdmin or inline mix-in: its `autocomplete_fields` use SafeAutocompleteSelect."""

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if "widget" not in kwargs and db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = SafeAutocompleteSelect(db_field, self.admin_site, using=kwargs.get("using"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class SafeModelMultipleChoiceField(forms.ModelMultipleChoiceField):
    """A many-to-many box (a dataset's teams) that names a value no key can be as a form error.

    Stock Django looks the whole list up with `pk__in`; a number past the key column's range reaches the
    database driver, and SQLite raises OverflowError (a 500). A single choice is safe already: Django makes
    an exact lookup of such a number match no row."""

    def _check_values(self, value):
        key_field = self.queryset.model._meta.get_field(self.to_field_name or self.queryset.model._meta.pk.name)
        values = value if isinstance(value, list | tuple | set | frozenset) else [value]
        for pk in values:
            if isinstance(pk, str | int) and pk not in ("",) and not could_be_key(key_field, pk, self.queryset.db):
                raise ValidationError(
                    self.error_messages["invalid_choice"], code="invalid_choice", params={"value": pk}
                )
        return super()._check_values(value)
