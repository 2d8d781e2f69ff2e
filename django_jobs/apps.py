from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules

from .conf import runs_tasks


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """The one place that registers things: the system checks, the ``post_migrate``
        receiver (a SQLite file put in WAL mode, what the checks say of the new tables),
        every installed app's ``@job`` handlers, and the job that runs Django tasks when a
        ``TASKS`` backend is a ``JobsBackend``."""
        from . import checks  # noqa: F401  (registers the system checks)
        from .db.migrated import after_migrate

        post_migrate.connect(after_migrate, sender=self, dispatch_uid="django_jobs.after_migrate")

        # Import every installed app's jobs.py so that its @job handlers register.
        autodiscover_modules("jobs")
        if any(runs_tasks(params) for params in (getattr(settings, "TASKS", None) or {}).values()):
            from .tasks import runner  # noqa: F401  (registers the task runner)
