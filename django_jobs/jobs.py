"""The jobs django-jobs registers itself, found as every app's ``jobs`` module is.

When a ``TASKS`` backend is :class:`~django_jobs.backend.JobsBackend` (or a
subclass), the job that runs Django tasks is registered, so that workers run them.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string


def runs_tasks(params: Any) -> bool:
    path = params.get("BACKEND") if isinstance(params, dict) else None
    if not isinstance(path, str):
        return False
    try:
        backend = import_string(path)
    except ImportError:
        return False  # Django's own check says so when the backend is used
    return bool(getattr(backend, "runs_on_django_jobs", False))


if any(runs_tasks(params) for params in (getattr(settings, "TASKS", None) or {}).values()):
    import django_jobs.backend  # noqa: F401  (registers the task runner)
