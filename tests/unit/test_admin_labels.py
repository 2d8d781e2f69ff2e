"""The admin's labels are translatable: lazy, as in Django's contrib apps."""

from typing import Any

import pytest
from django.contrib import admin
from django.utils.functional import Promise

from django_jobs.admin.common import AttemptInline
from django_jobs.models import DeadLetter, Job, RecurringJob, WorkerProcess


def labels(model_admin: Any) -> list[tuple[str, Any]]:
    """Every label the page's code gives: its columns and fields, actions and filters."""
    found = []
    names = [
        *getattr(model_admin, "list_display", ()),
        *model_admin.readonly_fields,
        *(getattr(model_admin, "actions", None) or ()),
    ]
    for name in names:
        attr = getattr(model_admin, name, None) if isinstance(name, str) else None
        if attr is not None and hasattr(attr, "short_description"):
            found.append((name, attr.short_description))
    for list_filter in getattr(model_admin, "list_filter", ()):
        if isinstance(list_filter, type):
            found.append((list_filter.__name__, list_filter.title))
    return found


@pytest.mark.parametrize("model", [Job, DeadLetter, RecurringJob, WorkerProcess])
def test_admin_labels_are_lazy_translations(model: type) -> None:
    found = labels(admin.site._registry[model])

    assert found
    assert [name for name, label in found if not isinstance(label, Promise)] == []


def test_admin_attempt_columns_are_lazy_translations() -> None:
    inline = AttemptInline(Job, admin.site)

    found = labels(inline)

    assert {name for name, _ in found} >= {"started", "finished", "duration"}
    assert [name for name, label in found if not isinstance(label, Promise)] == []
